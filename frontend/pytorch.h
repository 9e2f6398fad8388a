/* PyTorch's spellings and dlcc's (frontend/pytorch.c): one table, read by
 * the parser (keywords) and by lowering (functions, keyword arguments,
 * names).  An entry is an alias, accepted as the dlcc spelling where no
 * ambiguity can arise, or a hint, which only a message shows.
 * docs/language.md, "Coming from PyTorch", lists every entry. */
#ifndef DLCC_FRONTEND_PYTORCH_H
#define DLCC_FRONTEND_PYTORCH_H

#include <stdbool.h>

typedef enum {
  PT_KEYWORD, /* a Python keyword where dlcc has another: def -> block */
  PT_FUNC,    /* a function or module name: cat -> concat */
  PT_ARG,     /* a keyword argument: kernel_size -> kernel */
  PT_NAME,    /* a name: False -> false */
} PtWhere;

typedef struct PtSpelling {
  PtWhere where;
  const char *torch; /* PyTorch's spelling */
  const char *dlcc;  /* dlcc's, or NULL when dlcc has none */
  /* PT_ARG: the functions it is an alias for, comma-separated (NULL:
   * every function that has the dlcc parameter); PT_FUNC/PT_ARG hints:
   * where it applies in the same way. */
  const char *only;
  bool alias;       /* accepted as dlcc's spelling; else only suggested */
  const char *note; /* why, or what to write instead; may be NULL */
} PtSpelling;

/* The entry for `word` at `where` (in function `fn` for PT_ARG), or NULL.
 * For PT_ARG only entries whose dlcc parameter is among `params` (the n
 * parameters of fn) count, and hints without a dlcc spelling always do. */
const PtSpelling *fe_torch_find(PtWhere where, const char *word, const char *fn, const char *const *params, int n);

/* " (note)" or "": for appending an entry's note to a message. */
const char *fe_torch_note(const PtSpelling *s, char *buf, int len);

#endif
