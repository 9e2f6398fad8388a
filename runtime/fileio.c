/* Opening the files a model brings (.npy, safetensors, ONNX external
 * data): takes a path, returns a descriptor of a regular file and its
 * size, or why not.  Such files may come from anyone: a FIFO or a device
 * named like a tensor file must not block or feed the reader, so the open
 * never waits and everything but a regular file is refused. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensorio.h"

const char *rt_file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a file";
}

int rt_open_regular(const char *path, int flags, int64_t *size, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (flags & RT_NOFOLLOW ? O_NOFOLLOW : 0));
  if (fd < 0 && errno == ELOOP && (flags & RT_NOFOLLOW)) {
    snprintf(err, errlen, "is a symbolic link, which is not followed here");
    return -1;
  }
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    snprintf(err, errlen, "%s", strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "is %s, not a regular file", rt_file_kind(st.st_mode));
    close(fd);
    return -1;
  }
  /* Reads of a regular file never block; later reads need no flag. */
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  *size = (int64_t)st.st_size;
  return fd;
}

int rt_read_at(int fd, void *dst, size_t n, int64_t offset) {
  unsigned char *p = dst;
  while (n > 0) {
    ssize_t got = pread(fd, p, n, (off_t)offset);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) errno = 0; /* the file ended early */
    if (got <= 0) return -1;
    p += got, n -= (size_t)got, offset += got;
  }
  return 0;
}

int rt_fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}
