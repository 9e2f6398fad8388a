/* The Graphviz writer: takes a graph and IrDotOptions, writes a `digraph`
 * a person can read and Graphviz lays out in seconds.  What depends on
 * the weights alone (params, constants, a batch norm's folding) is no
 * node of its own: its params are listed in the node that uses them.
 * Ops (or, with o->kernels, fusion groups) are boxes, inside one cluster
 * per `as` scope; scopes deeper than o->depth are one node each; inputs
 * and outputs are ellipses; each edge carries the type of its value. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

/* Longer label lines are cut: the label is a hint, the IR text has the
 * whole truth. */
enum { LINE_MAX_CHARS = 40, PARAMS_SHOWN = 4, STEPS_SHOWN = 3, SCOPE_DEPTH_MAX = 32 };

typedef enum { BOX_OP, BOX_INPUT, BOX_SCOPE } BoxKind;

typedef struct Box {
  BoxKind kind;
  const char *scope; /* "" at the top */
  bool scope_known;  /* some member had a scope */
  const char *ops;   /* "conv2d+relu", or the op and its attributes */
  const char *lines; /* notes and params, '\n' between */
  int n_merged;      /* a collapsed scope: the boxes inside that compute */
  bool computes;     /* with notes: some member has steps */
  int first, n; /* its members in Dot.members */
} Box;

typedef struct Edge {
  int from, to, order;
  const Value *v;
} Edge;

typedef struct Dot {
  Graph *g;
  Arena *a;
  const IrDotOptions *o;
  int n_nodes;
  Node **node;     /* by id */
  bool *folded;    /* by id: a function of the weights alone, drawn in its users */
  int *box;        /* by id: its box, or -1 */
  int *stamp;      /* by id: the last box whose weights walk reached it */
  int *queue;      /* the walk's */
  const Node **params; /* the params it found */
  int n_boxes;
  Box *boxes;
  int *members;    /* node ids, box by box */
  int *final;      /* by box: the box it is drawn as (depth collapses) */
  int n_scopes;
  const char **scopes; /* sorted: a scope right before its subscopes */
  int *parent;         /* by scope: the enclosing one, or -1 */
  int *cluster;        /* by scope: the nearest enclosing drawn cluster (itself if drawn), or -1 */
  bool *drawn;
  int n_edges;
  Edge *edges;
} Dot;

/* ---- text ---- */

/* Writes s escaped for a double-quoted DOT string; '\n' starts a line. */
static void put_escaped(FILE *f, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    if (ch == '"' || ch == '\\') {
      fputc('\\', f);
      fputc(ch, f);
    } else if (ch == '\n') {
      fputs("\\n", f);
    } else if ((unsigned char)ch >= 32 || ch == '\t') {
      fputc(ch, f);
    }
  }
}

static void put_str(FILE *f, const char *s) { put_escaped(f, s ? s : "", s ? strlen(s) : 0); }

/* s cut to max characters with "..." */
static const char *cut_at(Arena *a, const char *s, int max) {
  if (strlen(s) <= (size_t)max) return s;
  return arena_printf(a, "%.*s...", max - 3, s);
}

static const char *cut(Arena *a, const char *s) { return cut_at(a, s, LINE_MAX_CHARS); }

static bool attr_is_default(const Graph *g, const Node *n, const Attr *a) {
  const AttrSpec *s = ir_op_attr_spec(n->op, a->name);
  if (!s || !s->default_text || strcmp(s->default_text, "?") == 0) return false;
  Attr d;
  if (!ir_parse_attr_value(&g->ctx->arena, s->default_text, s->kind, &d) || d.kind != a->kind) return false;
  switch (a->kind) {
    case AK_INT: return d.i == a->i;
    case AK_FLOAT: return d.f == a->f;
    case AK_DTYPE: return d.dt == a->dt;
    case AK_STR: return strcmp(d.s, a->s) == 0;
    case AK_INTS:
      if (d.ints.n != a->ints.n) return false;
      for (int i = 0; i < d.ints.n; i++)
        if (d.ints.v[i] != a->ints.v[i]) return false;
      return true;
  }
  return false;
}

/* "stride=[2, 2], pad=[3, 3, 3, 3]": the attributes that differ from
 * their defaults, in the arena (a failure unwinds: nothing is written
 * before every label is built). */
static const char *attr_line(const Graph *g, const Node *n) {
  char *buf = NULL;
  size_t len = 0;
  bool *skip = ARENA_ARRAY(&g->ctx->arena, bool, n->n_attrs + 1);
  for (int i = 0; i < n->n_attrs; i++) skip[i] = attr_is_default(g, n, &n->attrs[i]);
  FILE *m = open_memstream(&buf, &len);
  if (!m) ctx_out_of_memory(g->ctx);
  int shown = 0;
  for (int i = 0; i < n->n_attrs; i++) {
    if (skip[i]) continue;
    fprintf(m, "%s%s=", shown++ ? ", " : "", n->attrs[i].name);
    ir_print_attr_value(m, &n->attrs[i]);
  }
  bool bad = ferror(m);
  if (fclose(m) != 0 || bad || !buf) {
    free(buf);
    ctx_out_of_memory(g->ctx);
  }
  /* arena_strdup may unwind: buf must be freed first. */
  char line[LINE_MAX_CHARS + 1];
  snprintf(line, sizeof line, "%s", buf);
  bool long_line = len > LINE_MAX_CHARS;
  free(buf);
  if (long_line) return arena_printf(&g->ctx->arena, "%.*s...", LINE_MAX_CHARS - 3, line);
  return arena_strdup(&g->ctx->arena, line);
}

/* ---- scopes ---- */

static int depth_of(const char *s) {
  if (!*s) return 0;
  int d = 1;
  for (; *s; s++) d += *s == '.';
  return d;
}

/* The first k parts of s. */
static const char *first_parts(Arena *a, const char *s, int k) {
  const char *p = s;
  for (int i = 0; *p && i < k; p++)
    if (*p == '.' && ++i == k) break;
  return arena_strndup(a, s, (size_t)(p - s));
}

/* The parts a and b share from the start. */
static const char *common(Arena *a, const char *x, const char *y) {
  size_t end = 0, i = 0;
  for (; x[i] && x[i] == y[i]; i++)
    if (x[i] == '.') end = i;
  if (!x[i] && (!y[i] || y[i] == '.')) end = i;
  else if (!y[i] && x[i] == '.') end = i;
  return end == strlen(x) ? x : arena_strndup(a, x, end);
}

/* Part by part, '.' before every other character: a scope sorts right
 * before its subscopes. */
static int scope_cmp(const void *pa, const void *pb) {
  const unsigned char *a = *(const unsigned char *const *)pa, *b = *(const unsigned char *const *)pb;
  for (; *a && *a == *b; a++, b++) {
  }
  int ca = *a == '.' ? 1 : *a ? *a + 1 : 0, cb = *b == '.' ? 1 : *b ? *b + 1 : 0;
  return ca - cb;
}

static int find_scope(const Dot *d, const char *s) {
  const char **hit = bsearch(&s, d->scopes, (size_t)d->n_scopes, sizeof *d->scopes, scope_cmp);
  return hit ? (int)(hit - d->scopes) : -1;
}

/* s without the name of the scope it is drawn in (a cluster's, or the
 * top's ""). */
static const char *relative(const Dot *d, const char *s, int within) {
  if (within < 0) return s;
  return s + strlen(d->scopes[within]) + (s[strlen(d->scopes[within])] == '.');
}

/* ---- phase 1: every box, scope, label and edge (may unwind) ---- */

static void fold_weights(Dot *d) {
  Graph *g = d->g;
  bool *output = ARENA_ARRAY(d->a, bool, d->n_nodes + 1);
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] && g->outputs[i]->def) output[g->outputs[i]->def->id] = true;
  for (Node *n = g->first; n; n = n->next) {
    bool w = n->op != OP_INPUT;
    for (int i = 0; w && i < n->n_in; i++) w = !n->in[i] || !n->in[i]->def || d->folded[n->in[i]->def->id];
    /* An output stays a node even when the weights alone give it. */
    d->folded[n->id] = w;
    if (w && output[n->id]) d->folded[n->id] = false;
  }
  /* Only a node computed from folded ones is folded itself. */
  for (Node *n = g->first; n; n = n->next)
    for (int i = 0; d->folded[n->id] && i < n->n_in; i++)
      if (n->in[i] && n->in[i]->def && !d->folded[n->in[i]->def->id]) d->folded[n->id] = false;
}

static int by_group_then_id(const void *pa, const void *pb) {
  const Node *a = *(const Node *const *)pa, *b = *(const Node *const *)pb;
  if (a->group != b->group) return a->group < b->group ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

/* By node id: the first drawn member of its fusion group (group ids are
 * any int: sorted, not indexed). */
static int *group_leaders(Dot *d) {
  int *leader = ARENA_ARRAY(d->a, int, d->n_nodes + 1);
  const Node **grouped = ARENA_ARRAY(d->a, const Node *, d->n_nodes + 1);
  int n = 0;
  for (Node *x = d->g->first; x; x = x->next) {
    leader[x->id] = x->id;
    if (d->o->kernels && x->group >= 0 && !d->folded[x->id]) grouped[n++] = x;
  }
  qsort(grouped, (size_t)n, sizeof *grouped, by_group_then_id);
  for (int i = 1; i < n; i++)
    if (grouped[i]->group == grouped[i - 1]->group) leader[grouped[i]->id] = leader[grouped[i - 1]->id];
  return leader;
}

static void make_boxes(Dot *d) {
  int *leader = group_leaders(d);
  d->boxes = ARENA_ARRAY(d->a, Box, d->n_nodes + 1);
  int *count = ARENA_ARRAY(d->a, int, d->n_nodes + 1);
  for (Node *n = d->g->first; n; n = n->next) {
    d->box[n->id] = -1;
    if (d->folded[n->id]) continue;
    int b = leader[n->id] != n->id ? d->box[leader[n->id]] : -1;
    if (b < 0) {
      b = d->n_boxes++;
      d->boxes[b] = (Box){.kind = n->op == OP_INPUT ? BOX_INPUT : BOX_OP, .scope = "", .lines = ""};
    }
    d->box[n->id] = b;
    count[b]++;
  }
  d->members = ARENA_ARRAY(d->a, int, d->n_nodes + 1);
  for (int b = 0, at = 0; b < d->n_boxes; b++) {
    d->boxes[b].first = at;
    at += count[b];
  }
  for (Node *n = d->g->first; n; n = n->next) {
    int b = d->box[n->id];
    if (b >= 0) d->members[d->boxes[b].first + d->boxes[b].n++] = n->id;
  }
}

static void add_line(Dot *d, Box *b, const char *line) {
  b->lines = *b->lines ? arena_printf(d->a, "%s\n%s", b->lines, line) : line;
}

static const char *param_name(const Node *n) {
  const Attr *a = ir_attr(n, "name");
  return a ? a->s : "param";
}

/* Declaration order. */
static int by_id(const void *pa, const void *pb) {
  const Node *a = *(const Node *const *)pa, *b = *(const Node *const *)pb;
  return (a->id > b->id) - (a->id < b->id);
}

/* The length of the scope part of a param's name: "bn1" of "bn1.bias". */
static size_t scope_len(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot ? (size_t)(dot - name) : 0;
}

/* A param's line, or those of one scope on one line:
 * "conv1.weight f32[64, 3, 7, 7]", "bn1: weight, bias, running_mean, ...".
 * Names are from the box's scope. */
static void param_lines(Dot *d, Box *box, const Node **params, int n) {
  bool *done = ARENA_ARRAY(d->a, bool, n + 1);
  int lines = 0;
  for (int i = 0; i < n; i++) {
    if (done[i]) continue;
    const char *s = param_name(params[i]);
    size_t len = scope_len(s);
    /* What it shares with the box's scope goes: "layer1.0.bn3" of a box
     * in "layer1.0.conv3" is "bn3". */
    size_t k = strlen(common(d->a, box->scope, arena_strndup(d->a, s, len)));
    size_t from = k ? k + 1 : 0;
    int same = 0;
    const char *leaves = "";
    for (int j = i; j < n; j++) {
      const char *t = param_name(params[j]);
      if (done[j] || scope_len(t) != len || strncmp(s, t, len) != 0) continue;
      done[j] = true;
      leaves = arena_printf(d->a, "%s%s%s", leaves, same++ ? ", " : "", t + len + (len > 0));
    }
    if (lines++ == PARAMS_SHOWN) {
      add_line(d, box, "...");
      return;
    }
    const char *line;
    if (same == 1) {
      char dims[IR_TYPE_STR_MAX];
      /* room for a long name and its shape */
      const char *type = ir_type_str(&params[i]->out[0].type, dims, sizeof dims);
      line = cut_at(d->a, arena_printf(d->a, "%s %s", s + from, type), 2 * LINE_MAX_CHARS);
    } else {
      const char *scope = len > from ? arena_strndup(d->a, s + from, len - from) : "";
      line = cut(d->a, *scope ? arena_printf(d->a, "%s: %s", scope, leaves) : leaves);
    }
    add_line(d, box, line);
  }
}

/* The params and the init steps of what the weights alone compute for
 * box b, walking back from its members' operands (each node once per
 * box). */
static void gather_weights(Dot *d, int b, const char **param_scope, int *n_params, int *n_init) {
  Box *box = &d->boxes[b];
  /* Breadth first: params in operand order. */
  int *queue = d->queue, head = 0, top = 0;
  for (int m = 0; m < box->n; m++) {
    const Node *n = d->node[d->members[box->first + m]];
    for (int i = 0; i < n->n_in; i++) {
      const Node *in = n->in[i] && n->in[i]->def ? n->in[i]->def : NULL;
      if (in && d->folded[in->id] && d->stamp[in->id] != b + 1) {
        d->stamp[in->id] = b + 1;
        queue[top++] = in->id;
      }
    }
  }
  while (head < top) {
    const Node *n = d->node[queue[head++]];
    /* One line per step of the init graph, however many */
    for (const char *note = d->o->notes ? d->o->notes[n->id] : NULL; note; note = strchr(note + 1, '\n'))
      (*n_init)++;
    if (n->op == OP_PARAM) {
      const char *s = param_name(n);
      const char *scope = arena_strndup(d->a, s, scope_len(s));
      *param_scope = *param_scope ? common(d->a, *param_scope, scope) : scope;
      d->params[(*n_params)++] = n;
    }
    for (int i = 0; i < n->n_in; i++) {
      const Node *in = n->in[i] && n->in[i]->def ? n->in[i]->def : NULL;
      if (in && d->stamp[in->id] != b + 1) {
        d->stamp[in->id] = b + 1;
        queue[top++] = in->id;
      }
    }
  }
}

/* A box's ops, scope, notes and weights. */
static void describe(Dot *d, int b) {
  Box *box = &d->boxes[b];
  const char *ops = "";
  for (int m = 0; m < box->n; m++) {
    const Node *n = d->node[d->members[box->first + m]];
    if (n->scope) {
      box->scope = box->scope_known ? common(d->a, box->scope, n->scope) : n->scope;
      box->scope_known = true;
    }
    const char *name = ir_ops[n->op].name;
    if (n->op == OP_INPUT) {
      const Attr *a = ir_attr(n, "name");
      ops = arena_printf(d->a, "input\n%s", a ? a->s : "");
    } else if (!*ops) {
      ops = name;
    } else {
      /* "+relu" once, however many relus the kernel has */
      size_t k = strlen(name);
      bool seen = false;
      for (const char *p = strstr(ops, name); p && !seen; p = strstr(p + 1, name))
        seen = (p == ops || p[-1] == '+') && (p[k] == '+' || !p[k]);
      if (!seen) ops = arena_printf(d->a, "%s+%s", ops, name);
    }
    const char *note = d->o->notes ? d->o->notes[n->id] : NULL;
    if (note) add_line(d, box, note);
    box->computes = box->computes || note || !d->o->notes;
  }
  if (box->kind == BOX_OP && box->n == 1) {
    const char *attrs = attr_line(d->g, d->node[d->members[box->first]]);
    box->ops = *attrs ? arena_printf(d->a, "%s\n%s", ops, attrs) : ops;
  } else {
    box->ops = box->kind == BOX_INPUT ? ops : cut(d->a, ops);
  }
  /* A kernel has a few steps; an unfused LSTM has hundreds. */
  int n_steps = *box->lines ? 1 : 0;
  const char *third = NULL;
  for (const char *p = strchr(box->lines, '\n'); p; p = strchr(p + 1, '\n'))
    if (++n_steps == STEPS_SHOWN + 1) third = p;
  if (n_steps > STEPS_SHOWN + 1)
    box->lines = arena_printf(d->a, "%.*s\n+%d more steps", (int)(third - box->lines), box->lines,
                              n_steps - STEPS_SHOWN);
  const char *param_scope = NULL;
  int n_params = 0, n_init = 0;
  gather_weights(d, b, &param_scope, &n_params, &n_init);
  /* The IR text and ONNX give no scope: the params' names tell it. */
  if (!box->scope_known && param_scope) box->scope = param_scope;
  /* Each scope's parents are strings of their own: a name of thousands
   * of parts (a fuzzer's) must not cost their square. */
  if (depth_of(box->scope) > SCOPE_DEPTH_MAX) box->scope = first_parts(d->a, box->scope, SCOPE_DEPTH_MAX);
  if (n_init) add_line(d, box, arena_printf(d->a, "init: %d step%s (once per weights)", n_init, n_init == 1 ? "" : "s"));
  qsort(d->params, (size_t)n_params, sizeof *d->params, by_id);
  param_lines(d, box, d->params, n_params);
}

/* Scopes deeper than o->depth: one box each, for everything inside. */
static void collapse(Dot *d) {
  int n = d->n_boxes;
  d->final = ARENA_ARRAY(d->a, int, 2 * n + 1);
  for (int b = 0; b < n; b++) d->final[b] = b;
  if (d->o->depth < 0) return;
  const char **key = ARENA_ARRAY(d->a, const char *, n + 1), **keys = ARENA_ARRAY(d->a, const char *, n + 1);
  int n_keys = 0;
  for (int b = 0; b < n; b++)
    if (depth_of(d->boxes[b].scope) > d->o->depth)
      keys[n_keys++] = key[b] = first_parts(d->a, d->boxes[b].scope, d->o->depth + 1);
  if (!n_keys) return;
  qsort(keys, (size_t)n_keys, sizeof *keys, scope_cmp);
  int *count = ARENA_ARRAY(d->a, int, n_keys + 1), k = 0;
  for (int i = 0; i < n_keys; i++) {
    if (!k || scope_cmp(&keys[k - 1], &keys[i]) != 0) keys[k++] = keys[i];
    count[k - 1]++;
  }
  /* A scope with one box inside stays that box. */
  int *box_of_key = ARENA_ARRAY(d->a, int, k + 1);
  Box *grown = ARENA_ARRAY(d->a, Box, n + k + 1);
  memcpy(grown, d->boxes, sizeof(Box) * (size_t)n);
  d->boxes = grown;
  for (int i = 0; i < k; i++) {
    box_of_key[i] = count[i] > 1 ? d->n_boxes : -1;
    if (count[i] < 2) continue;
    d->final[d->n_boxes] = d->n_boxes;
    d->boxes[d->n_boxes++] = (Box){.kind = BOX_SCOPE, .scope = keys[i], .lines = ""};
  }
  for (int b = 0; b < n; b++) {
    if (!key[b]) continue;
    const char **hit = bsearch(&key[b], keys, (size_t)k, sizeof *keys, scope_cmp);
    int into = box_of_key[hit - keys];
    if (into < 0) continue;
    d->final[b] = into;
    d->boxes[into].n_merged += d->boxes[b].computes;
  }
}

/* The tree of scopes the drawn boxes sit in, and which are clusters: a
 * scope holding one thing alone is no cluster (its name goes to that
 * thing's label). */
static void build_scopes(Dot *d) {
  int cap = 0;
  for (int b = 0; b < d->n_boxes; b++)
    if (d->final[b] == b) cap += depth_of(d->boxes[b].scope);
  d->scopes = ARENA_ARRAY(d->a, const char *, cap + 1);
  int n = 0;
  for (int b = 0; b < d->n_boxes; b++) {
    if (d->final[b] != b) continue;
    const char *s = d->boxes[b].scope;
    /* A collapsed scope is the box itself: its parents are the scopes. */
    int k = depth_of(s) - (d->boxes[b].kind == BOX_SCOPE);
    for (int i = 1; i <= k; i++) d->scopes[n++] = first_parts(d->a, s, i);
  }
  qsort(d->scopes, (size_t)n, sizeof *d->scopes, scope_cmp);
  int k = 0;
  for (int i = 0; i < n; i++)
    if (!k || scope_cmp(&d->scopes[k - 1], &d->scopes[i]) != 0) d->scopes[k++] = d->scopes[i];
  d->n_scopes = k;
  d->parent = ARENA_ARRAY(d->a, int, k + 1);
  d->cluster = ARENA_ARRAY(d->a, int, k + 1);
  d->drawn = ARENA_ARRAY(d->a, bool, k + 1);
  int *items = ARENA_ARRAY(d->a, int, k + 1);
  for (int i = 0; i < k; i++) {
    int depth = depth_of(d->scopes[i]);
    d->parent[i] = depth > 1 ? find_scope(d, first_parts(d->a, d->scopes[i], depth - 1)) : -1;
    if (d->parent[i] >= 0) items[d->parent[i]]++;
  }
  for (int b = 0; b < d->n_boxes; b++) {
    if (d->final[b] != b) continue;
    const Box *box = &d->boxes[b];
    const char *home = box->kind == BOX_SCOPE ? first_parts(d->a, box->scope, depth_of(box->scope) - 1) : box->scope;
    int s = *home ? find_scope(d, home) : -1;
    if (s >= 0) items[s]++;
  }
  /* Sorted order puts parents first. */
  for (int i = 0; i < k; i++) {
    d->drawn[i] = items[i] >= 2;
    int p = d->parent[i];
    d->cluster[i] = d->drawn[i] ? i : p >= 0 ? d->cluster[p] : -1;
  }
}

static int edge_cmp(const void *pa, const void *pb) {
  const Edge *a = pa, *b = pb;
  if (a->from != b->from) return a->from < b->from ? -1 : 1;
  if (a->to != b->to) return a->to < b->to ? -1 : 1;
  return a->order - b->order;
}

/* One edge per pair of drawn boxes, labelled with the first value. */
static void make_edges(Dot *d) {
  int uses = 0;
  for (Node *n = d->g->first; n; n = n->next) uses += n->n_in;
  d->edges = ARENA_ARRAY(d->a, Edge, uses + 1);
  for (Node *n = d->g->first; n; n = n->next) {
    if (d->box[n->id] < 0) continue;
    int to = d->final[d->box[n->id]];
    for (int i = 0; i < n->n_in; i++) {
      const Value *v = n->in[i];
      if (!v || !v->def || d->box[v->def->id] < 0) continue;
      int from = d->final[d->box[v->def->id]];
      if (from == to) continue;
      int k = d->n_edges++;
      d->edges[k] = (Edge){from, to, k, v};
    }
  }
  qsort(d->edges, (size_t)d->n_edges, sizeof *d->edges, edge_cmp);
  int k = 0;
  for (int i = 0; i < d->n_edges; i++)
    if (!k || d->edges[k - 1].from != d->edges[i].from || d->edges[k - 1].to != d->edges[i].to)
      d->edges[k++] = d->edges[i];
  d->n_edges = k;
}

/* ---- phase 2: writing ---- */

/* The cluster a box is drawn in, or -1 for the top. */
static int box_cluster(const Dot *d, const Box *b, const char **home) {
  *home = b->kind == BOX_SCOPE ? first_parts(d->a, b->scope, depth_of(b->scope) - 1) : b->scope;
  int s = **home ? find_scope(d, *home) : -1;
  return s >= 0 ? d->cluster[s] : -1;
}

static void print_box(FILE *f, const Dot *d, int b, const char *home, int within) {
  const Box *box = &d->boxes[b];
  fprintf(f, "  n%d [label=\"", b);
  /* The scopes between its cluster and itself that are no cluster. */
  const char *name = box->kind == BOX_SCOPE ? relative(d, box->scope, within) : relative(d, home, within);
  if (box->kind == BOX_SCOPE) {
    put_str(f, name);
    fprintf(f, "\\n%d %s%s", box->n_merged, d->o->kernels ? "kernel" : "op", box->n_merged == 1 ? "" : "s");
    fputs("\", style=\"rounded,filled\", fillcolor=lightyellow];\n", f);
    return;
  }
  if (box->kind == BOX_INPUT) {
    put_str(f, box->ops);
    fputs("\", shape=ellipse, style=filled, fillcolor=lightblue];\n", f);
    return;
  }
  if (*name) {
    put_str(f, name);
    fputs(": ", f);
  }
  put_str(f, box->ops);
  if (*box->lines) {
    fputs("\\n", f);
    put_str(f, box->lines);
  }
  fputs("\"];\n", f);
}

static void print_type_label(FILE *f, const Value *v) {
  char buf[IR_TYPE_STR_MAX];
  fputs(" [label=\"", f);
  if (v->def && v->def->n_out > 1) fprintf(f, "#%d ", v->index);
  fputs(ir_type_str(&v->type, buf, sizeof buf), f);
  fputs("\"]", f);
}

static bool encloses(const Dot *d, int outer, int inner) {
  const char *o = d->scopes[outer], *i = d->scopes[inner];
  size_t n = strlen(o);
  return strncmp(o, i, n) == 0 && i[n] == '.';
}

void ir_print_dot_opts(FILE *f, Graph *g, const IrDotOptions *o) {
  ir_number(g);
  Dot d = {.g = g, .a = &g->ctx->arena, .o = o, .n_nodes = g->n_nodes};
  d.node = ARENA_ARRAY(d.a, Node *, d.n_nodes + 1);
  for (Node *n = g->first; n; n = n->next) d.node[n->id] = n;
  d.folded = ARENA_ARRAY(d.a, bool, d.n_nodes + 1);
  d.box = ARENA_ARRAY(d.a, int, d.n_nodes + 1);
  d.stamp = ARENA_ARRAY(d.a, int, d.n_nodes + 1);
  d.queue = ARENA_ARRAY(d.a, int, d.n_nodes + 1);
  d.params = ARENA_ARRAY(d.a, const Node *, d.n_nodes + 1);
  fold_weights(&d);
  make_boxes(&d);
  for (int b = 0; b < d.n_boxes; b++) describe(&d, b);
  collapse(&d);
  build_scopes(&d);
  make_edges(&d);
  /* The drawn boxes cluster by cluster (the top's first), in order. */
  const char **homes = ARENA_ARRAY(d.a, const char *, d.n_boxes + 1);
  int *within = ARENA_ARRAY(d.a, int, d.n_boxes + 1);
  int *start = ARENA_ARRAY(d.a, int, d.n_scopes + 3), *fill = ARENA_ARRAY(d.a, int, d.n_scopes + 3);
  int *order = ARENA_ARRAY(d.a, int, d.n_boxes + 1);
  for (int b = 0; b < d.n_boxes; b++) {
    within[b] = box_cluster(&d, &d.boxes[b], &homes[b]);
    if (d.final[b] == b) start[within[b] + 2]++;
  }
  for (int s = 0; s <= d.n_scopes; s++) start[s + 1] += start[s];
  memcpy(fill, start, sizeof(int) * (size_t)(d.n_scopes + 2));
  for (int b = 0; b < d.n_boxes; b++)
    if (d.final[b] == b) order[fill[within[b] + 1]++] = b;

  fputs("digraph \"", f);
  put_str(f, g->name);
  fputs("\" {\n  rankdir=TB;\n  graph [fontname=\"Helvetica\", fontsize=11];\n"
        "  node [shape=box, fontname=\"Helvetica\", fontsize=11];\n"
        "  edge [fontname=\"Helvetica\", fontsize=9];\n",
        f);
  for (int i = start[0]; i < start[1]; i++) print_box(f, &d, order[i], homes[order[i]], -1);
  /* Clusters in sorted order are a walk of the tree: close those that do
   * not enclose the next one. */
  int *open = ARENA_ARRAY(d.a, int, d.n_scopes + 1), n_open = 0;
  for (int s = 0; s < d.n_scopes; s++) {
    if (!d.drawn[s]) continue;
    while (n_open && !encloses(&d, open[n_open - 1], s)) {
      fputs("  }\n", f);
      n_open--;
    }
    int outer = n_open ? open[n_open - 1] : -1;
    fprintf(f, "  subgraph cluster_%d {\n  label=\"", s);
    put_str(f, relative(&d, d.scopes[s], outer));
    fputs("\";\n  style=rounded; color=gray60;\n", f);
    open[n_open++] = s;
    for (int i = start[s + 1]; i < start[s + 2]; i++) print_box(f, &d, order[i], homes[order[i]], s);
  }
  for (; n_open; n_open--) fputs("  }\n", f);
  for (int i = 0; i < d.n_edges; i++) {
    fprintf(f, "  n%d -> n%d", d.edges[i].from, d.edges[i].to);
    print_type_label(f, d.edges[i].v);
    fputs(";\n", f);
  }
  for (int i = 0; i < g->n_outputs; i++) {
    const Value *v = g->outputs[i];
    fprintf(f, "  out%d [label=\"output\\n", i);
    put_str(f, g->output_names ? g->output_names[i] : "");
    fputs("\", shape=ellipse, style=filled, fillcolor=palegreen];\n", f);
    if (!v || !v->def || d.box[v->def->id] < 0) continue;
    fprintf(f, "  n%d -> out%d", d.final[d.box[v->def->id]], i);
    print_type_label(f, v);
    fputs(";\n", f);
  }
  fputs("}\n", f);
}

void ir_print_dot(FILE *f, Graph *g) { ir_print_dot_opts(f, g, &(IrDotOptions){.depth = -1}); }
