/* Tensor files: NumPy .npy and safetensors, read into and written from
 * host memory, and PyTorch's torch.save files read.  Part of libdlcrt,
 * so it knows nothing of the compiler.  Every function returns 0, or -1 with a message naming the file (and the
 * tensor) in err; none exits.  Data is little-endian, C order. */
#ifndef DLCC_TENSORIO_H
#define DLCC_TENSORIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* In the order of plan.h's RtDTypeCode (and the compiler's DType), so a
 * plan's dtype code names the same type here. */
typedef enum {
  RT_F32,
  RT_F16,
  RT_BF16,
  RT_I8,
  RT_I32,
  RT_I64,
  RT_BOOL, /* one byte, 0 or 1 (NumPy's |b1, safetensors' BOOL) */
  RT_U8,   /* NumPy's |u1, safetensors' U8 */
  RT_F64,
  RT_I16,
  RT_U16,
  RT_U32,
  RT_U64,
  RT_DTYPE_COUNT
} RtDType;

/* Shared with plan.h, which defines the same limit. */
#ifndef RT_MAX_RANK
#define RT_MAX_RANK 8
#endif

typedef struct RtTensor {
  RtDType dtype;
  int rank;
  int64_t dims[RT_MAX_RANK];
  void *data; /* malloc'd by the readers; nbytes of it */
  size_t nbytes;
} RtTensor;

/* Files (fileio.c).  rt_open_regular opens path read-only as a regular
 * file, without waiting on a FIFO or a device (those are refused, as is
 * anything but a regular file; with RT_NOFOLLOW a symlink as the last
 * component too).  Returns the descriptor and the file's size, or -1 with
 * the reason alone in err ("is a FIFO, not a regular file", or
 * strerror's text). */
enum { RT_NOFOLLOW = 1 };
int rt_open_regular(const char *path, int flags, int64_t *size, char *err, size_t errlen);
/* n bytes at offset into dst: 0, or -1 (errno 0 when the file ended). */
int rt_read_at(int fd, void *dst, size_t n, int64_t offset);
/* "a FIFO", "a directory", ... for a file's st_mode. */
const char *rt_file_kind(mode_t mode);

/* The readers' messages: fmt into err; returns -1. */
int rt_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

int rt_dtype_size(RtDType t);
const char *rt_dtype_name(RtDType t); /* "f32", "bf16", "bool", ... */
/* Element count, or -1 when it overflows or a dim is negative. */
int64_t rt_numel(const RtTensor *t);
void rt_tensor_free(RtTensor *t);

/* .npy: reads versions 1.0, 2.0 and 3.0 with descr <f4 <f2 |i1 <i4 <i8
 * <f8 |u1 |b1 (bf16 has no NumPy descr); writes version 1.0 with the
 * header padded to a multiple of 64 bytes. */
int rt_npy_read(const char *path, RtTensor *out, char *err, size_t errlen);
/* The same checks without reading the data: out gets the header (dtype,
 * rank, dims, nbytes; data NULL), *data_start where the data begins and
 * *fortran its order; returns the open descriptor (the caller closes
 * it), for rows read on demand with rt_read_at, or -1 with the reason. */
int rt_npy_open(const char *path, RtTensor *out, int64_t *data_start, bool *fortran, char *err, size_t errlen);
/* The rest of rt_npy_read after rt_npy_open: the data from fd into
 * out->data (C order), fd closed either way; 0, or -1 with the reason
 * (out freed). */
int rt_npy_read_open(int fd, const char *path, RtTensor *out, int64_t data_start, bool fortran, char *err,
                     size_t errlen);
int rt_npy_write(const char *path, const RtTensor *t, char *err, size_t errlen);
/* Writes t as the file name (no '/') in the folder dirfd, made anew: an
 * existing file of that name is replaced, not written through, so a
 * symbolic or hard link planted there cannot send the data elsewhere.
 * path names the file in messages. */
int rt_npy_write_at(int dirfd, const char *name, const char *path, const RtTensor *t, char *err, size_t errlen);

/* An index of the names in a table (names[0..n), owned by the caller):
 * a hash of positions, so that a table read from a file is searched in
 * constant time per name whatever its size. */
typedef struct RtNames {
  int *slots; /* position + 1, or 0: empty */
  int n_slots; /* a power of two, at least twice the names */
} RtNames;

/* Room for n names; -1 when out of memory. */
int rt_names_init(RtNames *ix, int n);
/* Indexes names[i]: -1, or the position of an equal name indexed before
 * (then names[i] is not indexed). */
int rt_names_add(RtNames *ix, const char *const *names, int i);
/* name's position, or -1. */
int rt_names_find(const RtNames *ix, const char *const *names, const char *name);
void rt_names_free(RtNames *ix);

/* A safetensors file's contents.  The reader owns everything in a set it
 * returns (free with rt_tensor_set_free); a set passed to the writer is
 * only read. */
typedef struct RtTensorSet {
  int n;
  char **names;
  RtTensor *tensors;
  int n_meta; /* "__metadata__": string keys and values */
  char **meta_keys;
  char **meta_values;
  /* The reader's index of names; empty in a set built by hand, where
   * rt_tensor_set_find scans. */
  RtNames index;
  /* A set rt_safetensors_open made: its file stays open, and each
   * tensor's data is read by rt_safetensors_load (NULL until then). */
  bool lazy;
  int fd;
  char *path;
  int64_t *begins; /* per tensor: where its bytes start in the file */
  /* A sharded checkpoint's set (its index file): each shard's file, and
   * per tensor the shard it is read from (-1: read already); NULL for
   * one file, read through fd. */
  int n_files;
  int *fds;
  int *file_of;
} RtTensorSet;

/* Reads the whole file once, validating the header: size, JSON, every
 * entry's dtype, shape and offsets (exact size, inside the data, no
 * overlaps), duplicate names, all in time linear in the header's size,
 * before any tensor's data is allocated.  Only a regular file is read.
 * Tensors keep the file's order. */
int rt_safetensors_read(const char *path, RtTensorSet *out, char *err, size_t errlen);
/* Both readers also take a sharded checkpoint: a path ending in ".json"
 * is its index (Hugging Face's model.safetensors.index.json or
 * pytorch_model.bin.index.json: {"weight_map": {tensor: shard file}}),
 * and the set is every shard's tensors, each shard a bare file name in
 * the index's folder (no link followed), each tensor where the map says
 * and in one shard only. */
/* The same checks, reading no tensor's data: each tensor's is read when
 * rt_safetensors_load asks for it (a pipeline stage's, a model's own
 * among a checkpoint's others), so a caller holds only what it uses.
 * rt_tensor_set_free closes the file. */
int rt_safetensors_open(const char *path, RtTensorSet *out, char *err, size_t errlen);
/* Reads tensor i's data of a set rt_safetensors_open made, once; 0 at
 * once for a set whose data is there. */
int rt_safetensors_load(RtTensorSet *s, int i, char *err, size_t errlen);
/* A PyTorch torch.save file (a zip: data.pkl and data/N) of a
 * state_dict, or of a checkpoint dict holding one under "state_dict",
 * "model_state_dict", "model", "module" or "net" (torchfile.c): every
 * tensor read into out (not lazy), in the dict's order.  flags as
 * rt_open_regular's.  Its pickle is
 * never run: only the opcodes and calls torch.save writes for tensors
 * are read, anything else is refused or left inert.  rt_safetensors_read
 * and rt_safetensors_open hand a zip file here, so every weights path
 * takes both. */
int rt_torch_read(const char *path, int flags, RtTensorSet *out, char *err, size_t errlen);
/* Writes tensors in the set's order, packed, the header padded with
 * spaces to a multiple of 8 bytes. */
int rt_safetensors_write(const char *path, const RtTensorSet *set, char *err, size_t errlen);
const RtTensor *rt_tensor_set_find(const RtTensorSet *s, const char *name);
void rt_tensor_set_free(RtTensorSet *s);

#endif
