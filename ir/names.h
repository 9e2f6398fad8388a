/* Model-supplied names (graph, input, output and parameter names, source
 * paths) are data: these functions make them safe for each place dlcc
 * writes them, as comment text, a C string literal, a C identifier or a
 * file name.  One rule per context, used by every emitter; docs/names.md
 * gives the rules. */
#ifndef DLCC_NAMES_H
#define DLCC_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum {
  IR_IDENT_MAX = 63,      /* a C identifier's length, prefix and hash included (C11's 63 significant) */
  IR_FILE_STEM_MAX = 100, /* a file name's stem before a collision suffix and the extension */
  IR_SAFE_NAME_SIZE = 128 /* room for either, a collision suffix and the NUL */
};

typedef struct SafeName {
  char s[IR_SAFE_NAME_SIZE];
} SafeName;

/* s as text inside a comment (C's block and line comments, CUDA's, the
 * IR's `;`, a plan line): printable ASCII as itself; `\n`, `\r`, `\t`
 * and `\xHH` for every other byte, the backslash included; `*\/`, `/\*`
 * and `?\?` break up comment delimiters and trigraphs.  The result has
 * no line break, never closes or opens a comment and never ends in a
 * backslash.  NULL writes nothing. */
void ir_put_comment_text(FILE *f, const char *s);
/* Undoes ir_put_comment_text on text of n bytes into out (at least n + 1
 * bytes); returns false when the text is not such an escape. */
bool ir_unescape_comment_text(const char *text, size_t n, char *out);

/* s as a C string literal with its quotes: `\"`, `\\`, `\n`, `\?` (no
 * trigraph can form) and three-digit octal escapes for every other byte
 * outside printable ASCII.  NULL writes NULL. */
void ir_put_c_string(FILE *f, const char *s);

/* prefix + text as a C identifier: every byte outside [A-Za-z0-9_]
 * becomes `_`, a leading digit gets a `_` before it, upper folds a-z to
 * A-Z, and a result longer than IR_IDENT_MAX is cut with `_` and eight
 * hex digits of a hash of text after it.  Never empty. */
void ir_name_ident(const char *prefix, const char *text, bool upper, SafeName *out);

/* name as a file name stem (the caller adds ".npy"): bytes of
 * [A-Za-z0-9._-] as themselves, every other byte and a leading `.` as
 * `%HH`; the empty name is `%00`; a stem longer than IR_FILE_STEM_MAX is
 * cut and ends in `~` and eight hex digits of a hash of name.  It has no
 * `/`, is never `.` or `..` and never starts with `.`. */
void ir_name_file(const char *name, SafeName *out);

/* Makes names[0..n) distinct, in place and deterministically: the first
 * of equal names keeps it, each later one gets sep and the smallest
 * number from 2 up that no name holds, cut before the suffix to stay
 * within max_len bytes.  fold_case compares ASCII letters without case
 * (file names on a case-insensitive file system).  False when out of
 * memory. */
bool ir_names_unique(SafeName *names, int n, char sep, size_t max_len, bool fold_case);

#endif
