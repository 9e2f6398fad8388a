/* The Graphviz writer: takes a graph, writes a `digraph` with one box per
 * op (its non-default attributes on a second line), inputs and outputs as
 * ellipses, parameters as small grey boxes (a CNN has hundreds), and each
 * edge labelled with the type of the value it carries. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

/* Longer attribute lines are cut: the label is a hint, the IR text has
 * the whole truth. */
enum { ATTR_LINE_MAX = 40 };

/* Writes s escaped for a double-quoted DOT string. */
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
 * their defaults; the caller frees the text. */
static char *attr_line(const Graph *g, const Node *n, size_t *len) {
  /* Which to show, before the stream opens: attr_is_default allocates
   * from the arena, and a failure there would unwind past the stream. */
  bool *skip = ARENA_ARRAY(&g->ctx->arena, bool, n->n_attrs + 1);
  for (int i = 0; i < n->n_attrs; i++) skip[i] = attr_is_default(g, n, &n->attrs[i]);
  char *buf = NULL;
  *len = 0;
  FILE *m = open_memstream(&buf, len);
  if (!m) ctx_out_of_memory(g->ctx);
  int shown = 0;
  for (int i = 0; i < n->n_attrs; i++) {
    const Attr *a = &n->attrs[i];
    if (skip[i]) continue;
    fprintf(m, "%s%s=", shown++ ? ", " : "", a->name);
    ir_print_attr_value(m, a);
  }
  bool cut = ferror(m);
  if (fclose(m) != 0 || cut || !buf) {
    free(buf);
    ctx_out_of_memory(g->ctx);
  }
  return buf;
}

static void print_type_label(FILE *f, const Value *v) {
  char buf[IR_TYPE_STR_MAX];
  fputs(" [label=\"", f);
  if (v->def && v->def->n_out > 1) fprintf(f, "#%d ", v->index);
  fputs(ir_type_str(&v->type, buf, sizeof buf), f);
  fputs("\"]", f);
}

static void print_node(FILE *f, const Graph *g, const Node *n) {
  const char *op = ir_ops[n->op].name;
  fprintf(f, "  n%d [label=\"", n->id);
  if (n->op == OP_PARAM) {
    put_str(f, ir_attr(n, "name") ? ir_attr(n, "name")->s : "param");
    fputs("\", shape=box, style=filled, fillcolor=gray90, fontsize=9];\n", f);
    return;
  }
  if (n->op == OP_INPUT) {
    fputs("input\\n", f);
    put_str(f, ir_attr(n, "name") ? ir_attr(n, "name")->s : "");
    fputs("\", shape=ellipse, style=filled, fillcolor=lightblue];\n", f);
    return;
  }
  fputs(op, f);
  size_t len;
  char *attrs = attr_line(g, n, &len);
  if (attrs && len > 0) {
    fputs("\\n", f);
    if (len > ATTR_LINE_MAX) {
      put_escaped(f, attrs, ATTR_LINE_MAX - 3);
      fputs("...", f);
    } else {
      put_escaped(f, attrs, len);
    }
  }
  free(attrs);
  fputs("\"];\n", f);
}

void ir_print_dot(FILE *f, Graph *g) {
  ir_number(g);
  fputs("digraph \"", f);
  put_str(f, g->name);
  fputs("\" {\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\", fontsize=11];\n"
        "  edge [fontname=\"Helvetica\", fontsize=9];\n",
        f);
  for (const Node *n = g->first; n; n = n->next) print_node(f, g, n);
  for (const Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_in; i++) {
      const Value *v = n->in[i];
      if (!v || !v->def) continue;
      fprintf(f, "  n%d -> n%d", v->def->id, n->id);
      print_type_label(f, v);
      fputs(";\n", f);
    }
  for (int i = 0; i < g->n_outputs; i++) {
    const Value *v = g->outputs[i];
    fprintf(f, "  out%d [label=\"output\\n", i);
    put_str(f, g->output_names ? g->output_names[i] : "");
    fputs("\", shape=ellipse, style=filled, fillcolor=palegreen];\n", f);
    if (!v || !v->def) continue;
    fprintf(f, "  n%d -> out%d", v->def->id, i);
    print_type_label(f, v);
    fputs(";\n", f);
  }
  fputs("}\n", f);
}
