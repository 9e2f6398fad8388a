libdlcc_core_la_SOURCES += api/weights.h api/weights.c
libdlcc_core_la_SOURCES += api/calibrate.h api/calibrate.c
libdlcc_core_la_SOURCES += api/calib_device.h api/calib_device.c
libdlcc_core_la_SOURCES += api/quantreport.h api/quantreport.c
libdlcc_core_la_SOURCES += api/dlcc.c
include_HEADERS += include/dlcc.h
libdlcc_core_la_SOURCES += api/model.h api/train.c
