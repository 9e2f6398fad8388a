/* Takes the path of a shared object about to be dlopen-ed, returns
 * whether every part the loader maps lies inside the file.  glibc maps a
 * truncated library without complaint and the process dies of SIGBUS on
 * first touch; a model.so cut short by a full disk or a half-written cache
 * entry must be an error instead.  Files that are not 64-bit ELF pass:
 * dlopen reports those itself. */
#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime.h"

static int fits(uint64_t off, uint64_t len, uint64_t size) { return off <= size && len <= size - off; }

int rt_elf_check(const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "%s", strerror(errno));
    return -1;
  }
  struct stat st;
  Elf64_Ehdr eh;
  int rc = 0;
  if (fstat(fileno(f), &st) != 0 || fread(&eh, sizeof eh, 1, f) != 1 || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
      eh.e_ident[EI_CLASS] != ELFCLASS64)
    goto done;
  uint64_t size = (uint64_t)st.st_size;
  if (!fits(eh.e_phoff, (uint64_t)eh.e_phnum * eh.e_phentsize, size) ||
      (eh.e_shoff && !fits(eh.e_shoff, (uint64_t)eh.e_shnum * eh.e_shentsize, size)) ||
      eh.e_phentsize != sizeof(Elf64_Phdr)) {
    snprintf(err, errlen, "the file is truncated or corrupt (%" PRIu64 " bytes; its ELF tables lie past the end)",
             size);
    rc = -1;
    goto done;
  }
  for (int i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    if (fseek(f, (long)(eh.e_phoff + (uint64_t)i * sizeof ph), SEEK_SET) || fread(&ph, sizeof ph, 1, f) != 1) {
      snprintf(err, errlen, "cannot read its program headers");
      rc = -1;
      break;
    }
    if (ph.p_type != PT_NULL && !fits(ph.p_offset, ph.p_filesz, size)) {
      snprintf(err, errlen,
               "the file is truncated (%" PRIu64 " bytes; segment %d needs bytes %" PRIu64 " to %" PRIu64 ")", size,
               i, (uint64_t)ph.p_offset, (uint64_t)(ph.p_offset + ph.p_filesz));
      rc = -1;
      break;
    }
  }
done:
  fclose(f);
  return rc;
}
