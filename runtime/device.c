/* Device selection and the error slot every device shares: takes a
 * backend name ("cuda", "emu", "auto"), returns an opened RtDevice or
 * the reason none could be opened. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

RtDevice *rt_device_open(const char *kind, const char **chosen, char *err, size_t errlen) {
  if (chosen) *chosen = NULL;
  if (!kind || !*kind) kind = "auto";
  RtDevice *d = NULL;
  if (!strcmp(kind, "cuda")) {
    d = rt_cuda_open(err, errlen);
  } else if (!strcmp(kind, "emu")) {
    d = rt_emu_open(err, errlen);
  } else if (!strcmp(kind, "auto")) {
    char why_not_cuda[512];
    d = rt_cuda_open(why_not_cuda, sizeof why_not_cuda);
    if (!d) {
      char why_not_emu[512];
      d = rt_emu_open(why_not_emu, sizeof why_not_emu);
      if (!d)
        snprintf(err, errlen, "no backend could be opened: %s; %s", why_not_cuda, why_not_emu);
    }
  } else {
    snprintf(err, errlen, "unknown backend '%s' (expected auto, cuda or emu)", kind);
    return NULL;
  }
  if (d && chosen) *chosen = d->ops->name;
  return d;
}

void rt_device_close(RtDevice *d) {
  if (d) d->ops->destroy(d);
}

const char *rt_device_error(const RtDevice *d) { return d ? d->error : "no device"; }

bool rt_env_on(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

int rt_device_fail(RtDevice *d, const char *fmt, ...) {
  if (d->broken) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->error, sizeof d->error, fmt, ap);
  va_end(ap);
  return -1;
}
