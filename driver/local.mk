bin_PROGRAMS += dlcc
dlcc_SOURCES = driver/dlcc.c driver/run.c driver/memplan.c driver/quant_report.c driver/loss_flags.c driver/driver.h
dlcc_LDADD = libdlcc_core.la libdlcrt.la $(CJSON_LIBS) -lm
dlcc_SOURCES += driver/train.c driver/train.h driver/train_data.c driver/train_sched.c
