/* Safe forms of model-supplied names: takes a name (any bytes but NUL)
 * and writes it as comment text, a C string literal, a C identifier or a
 * file name stem, and makes a list of such names distinct.  A model file
 * from the internet must never become code or a path outside the folder
 * it is written to. */
#include "names.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t hash32(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static bool is_print(unsigned char c) { return c >= 0x20 && c < 0x7f; }

static bool is_ident_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* ---- comment text ---- */

void ir_put_comment_text(FILE *f, const char *s) {
  if (!s) return;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned char c = *p;
    /* The second character of a pair is the one escaped, so that neither
     * "* /" nor "/ *" nor "??" survives whatever follows it. */
    if (c == '/' && p > (const unsigned char *)s && p[-1] == '*') fputs("\\/", f);
    else if (c == '*' && p > (const unsigned char *)s && p[-1] == '/') fputs("\\*", f);
    else if (c == '?' && p > (const unsigned char *)s && p[-1] == '?') fputs("\\?", f);
    else if (c == '\n') fputs("\\n", f);
    else if (c == '\r') fputs("\\r", f);
    else if (c == '\t') fputs("\\t", f);
    else if (c == '\\' || !is_print(c)) fprintf(f, "\\x%02x", c);
    else fputc(c, f);
  }
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool ir_unescape_comment_text(const char *text, size_t n, char *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (text[i] != '\\') {
      out[k++] = text[i];
      continue;
    }
    if (++i == n) return false;
    switch (text[i]) {
      case 'n': out[k++] = '\n'; break;
      case 'r': out[k++] = '\r'; break;
      case 't': out[k++] = '\t'; break;
      case '/':
      case '*':
      case '?': out[k++] = text[i]; break;
      case 'x': {
        int hi = i + 2 < n ? hex_digit(text[i + 1]) : -1, lo = hi >= 0 ? hex_digit(text[i + 2]) : -1;
        if (lo < 0 || (hi == 0 && lo == 0)) return false;
        out[k++] = (char)(hi * 16 + lo);
        i += 2;
        break;
      }
      default: return false;
    }
  }
  out[k] = 0;
  return true;
}

/* ---- C string literals ---- */

void ir_put_c_string(FILE *f, const char *s) {
  if (!s) {
    fputs("NULL", f);
    return;
  }
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p == '\n') fputs("\\n", f);
    else if (*p == '?') fputs("\\?", f);
    else if (!is_print(*p)) fprintf(f, "\\%03o", *p); /* three digits: the next byte cannot join it */
    else fputc(*p, f);
  }
  fputc('"', f);
}

/* ---- identifiers and file names ---- */

void ir_name_ident(const char *prefix, const char *text, bool upper, SafeName *out) {
  char *q = out->s, *end = out->s + IR_IDENT_MAX;
  for (const char *p = prefix; *p && q < end; p++) *q++ = *p;
  if (q == out->s && (!*text || (*text >= '0' && *text <= '9'))) *q++ = '_';
  const char *p = text;
  for (; *p && q < end; p++) {
    unsigned char c = (unsigned char)*p;
    c = is_ident_char(c) ? c : '_';
    if (upper && c >= 'a' && c <= 'z') c = (unsigned char)(c - 'a' + 'A');
    *q++ = (char)c;
  }
  if (*p) { /* too long: a hash of the whole text keeps long names apart */
    q = out->s + IR_IDENT_MAX - 9;
    snprintf(q, 10, upper ? "_%08X" : "_%08x", (unsigned)hash32(text));
    return;
  }
  *q = 0;
}

static bool is_file_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

void ir_name_file(const char *name, SafeName *out) {
  static const char hex[] = "0123456789ABCDEF";
  if (!*name) {
    snprintf(out->s, sizeof out->s, "%%00");
    return;
  }
  size_t k = 0;
  const unsigned char *p = (const unsigned char *)name;
  for (; *p; p++) {
    bool plain = is_file_char(*p) && !(k == 0 && *p == '.');
    size_t need = plain ? 1 : 3;
    if (k + need > IR_FILE_STEM_MAX) break;
    if (plain) {
      out->s[k++] = (char)*p;
    } else {
      out->s[k++] = '%';
      out->s[k++] = hex[*p >> 4];
      out->s[k++] = hex[*p & 15];
    }
  }
  if (*p) {
    /* Cut at a whole escape so the stem stays readable, then the hash:
     * '~' never comes out of the encoding, so a cut stem cannot equal a
     * whole one. */
    while (k > IR_FILE_STEM_MAX - 9) k -= k >= 3 && out->s[k - 3] == '%' ? 3 : 1;
    k += (size_t)snprintf(out->s + k, sizeof out->s - k, "~%08x", (unsigned)hash32(name));
  }
  out->s[k] = 0;
}

/* ---- distinct names ---- */

static uint32_t hash_key(const char *s, bool fold_case) {
  uint32_t h = 2166136261u;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (fold_case && c >= 'A' && c <= 'Z') c = (unsigned char)(c - 'A' + 'a');
    h = (h ^ c) * 16777619u;
  }
  return h;
}

static bool same_key(const char *a, const char *b, bool fold_case) {
  for (;; a++, b++) {
    unsigned char x = (unsigned char)*a, y = (unsigned char)*b;
    if (fold_case && x >= 'A' && x <= 'Z') x = (unsigned char)(x - 'A' + 'a');
    if (fold_case && y >= 'A' && y <= 'Z') y = (unsigned char)(y - 'A' + 'a');
    if (x != y) return false;
    if (!x) return true;
  }
}

/* An open-addressing set of the names taken so far: slots hold indexes
 * into names[], -1 when free. */
typedef struct NameSet {
  const SafeName *names;
  int *slot;
  size_t mask;
  bool fold_case;
} NameSet;

/* The slot of s: where it is, or the free one where it would go. */
static size_t find_slot(const NameSet *t, const char *s) {
  size_t i = hash_key(s, t->fold_case) & t->mask;
  while (t->slot[i] >= 0 && !same_key(t->names[t->slot[i]].s, s, t->fold_case)) i = (i + 1) & t->mask;
  return i;
}

bool ir_names_unique(SafeName *names, int n, char sep, size_t max_len, bool fold_case) {
  if (n <= 1) return true;
  size_t cap = 4;
  while (cap < 2 * (size_t)n) cap *= 2;
  NameSet t = {.names = names, .slot = malloc(cap * sizeof(int)), .mask = cap - 1, .fold_case = fold_case};
  bool *dup = calloc((size_t)n, sizeof *dup);
  if (!t.slot || !dup) {
    free(t.slot);
    free(dup);
    return false;
  }
  for (size_t i = 0; i < cap; i++) t.slot[i] = -1;
  /* First every name that comes first keeps it, so a later duplicate's
   * suffix never takes a name the model itself uses. */
  for (int i = 0; i < n; i++) {
    size_t s = find_slot(&t, names[i].s);
    if (t.slot[s] >= 0) dup[i] = true;
    else t.slot[s] = i;
  }
  for (int i = 0; i < n; i++) {
    if (!dup[i]) continue;
    SafeName base = names[i];
    for (long k = 2;; k++) {
      char suffix[24];
      int n_suffix = snprintf(suffix, sizeof suffix, "%c%ld", sep, k);
      size_t len = strlen(base.s), room = max_len > (size_t)n_suffix ? max_len - (size_t)n_suffix : 1;
      if (len > room) len = room;
      snprintf(names[i].s, sizeof names[i].s, "%.*s%s", (int)len, base.s, suffix);
      size_t s = find_slot(&t, names[i].s);
      if (t.slot[s] < 0) {
        t.slot[s] = i;
        break;
      }
    }
  }
  free(t.slot);
  free(dup);
  return true;
}
