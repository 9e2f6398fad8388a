bin_PROGRAMS += dlcc
dlcc_SOURCES = driver/dlcc.c
dlcc_LDADD = libdlcc.la libdlcrt.la $(CJSON_LIBS) -lm
