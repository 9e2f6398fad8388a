libdlcc_la_SOURCES += api/weights.h api/weights.c
