bin_PROGRAMS += dlcc
dlcc_SOURCES = driver/dlcc.c
dlcc_LDADD = libdlcc.la $(CJSON_LIBS) -lm
