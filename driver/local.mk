bin_PROGRAMS += dlcc
dlcc_SOURCES = driver/dlcc.c driver/run.c driver/memplan.c driver/quant_report.c driver/loss_flags.c driver/driver.h
dlcc_LDADD = libdlcc_core.la libdlcrt.la $(CJSON_LIBS) -lm
