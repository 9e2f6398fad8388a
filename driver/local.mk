bin_PROGRAMS += dlcc
dlcc_SOURCES = driver/dlcc.c driver/run.c driver/run.h driver/run_pipe.c driver/memplan.c driver/quant_report.c driver/loss_flags.c driver/args.c driver/driver.h
dlcc_LDADD = libdlcc_core.la libdlcrt.la $(CJSON_LIBS) -lm
dlcc_SOURCES += driver/train.c driver/train.h driver/train_data.c driver/train_prefetch.c driver/train_sched.c driver/dist.c driver/dist.h driver/comm.c driver/comm.h driver/train_tp.c driver/train_tp.h
dlcc_SOURCES += driver/plan_parallel.c driver/scaleout.c driver/scaleout.h
dlcc_SOURCES += driver/pipeline.c driver/pipeline.h
# MPI only for dlcc itself: libdlcrt and a model.so never need it.
dlcc_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
dlcc_LDADD += $(MPI_LIBS)
if HAVE_NCCL
dlcc_SOURCES += driver/comm_nccl.c driver/comm_nccl.h
dlcc_CPPFLAGS += $(CUDA_CPPFLAGS)
dlcc_LDADD += $(NCCL_LIBS) $(CUDART_LIBS)
endif
