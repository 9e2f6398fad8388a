/* The IR text printer: takes a graph, writes the text format of docs/ir.md
 * (one node a line, values numbered in order, types after a colon, source
 * locations in trailing comments).  ir_parse reads it back to a graph that
 * prints identically. */
#include "ir.h"
#include "names.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* The location comment starts after this many characters when the node
 * text leaves room, so a column of comments lines up in a dump. */
enum { LOC_COLUMN = 64 };

static bool is_identifier(const char *s) {
  if (!(isalpha((unsigned char)s[0]) || s[0] == '_')) return false;
  for (const char *p = s; *p; p++)
    if (!(isalnum((unsigned char)*p) || *p == '_')) return false;
  return true;
}

static void print_quoted(FILE *f, const char *s) {
  Attr a = {.kind = AK_STR, .s = s ? s : ""};
  ir_print_attr_value(f, &a);
}

static void print_value(FILE *f, const Value *v) {
  if (v)
    fprintf(f, "%%%d", v->id);
  else
    fputs("%<null>", f);
}

static void print_type(FILE *f, const TensorType *t) {
  char buf[IR_TYPE_STR_MAX];
  fputs(ir_type_str(t, buf, sizeof buf), f);
}

/* " if %c if !%d": the If branches a node is needed on, outermost first. */
static void print_guard(FILE *f, const Guard *g) {
  if (!g) return;
  print_guard(f, g->outer);
  fputs(g->when ? " if " : " if !", f);
  print_value(f, g->cond);
}

/* Everything of a node's line but the indent and the location comment. */
static void print_node_body(FILE *f, const Node *n) {
  for (int i = 0; i < n->n_out; i++) {
    if (i) fputs(", ", f);
    print_value(f, &n->out[i]);
  }
  fprintf(f, " = %s", (unsigned)n->op < OP_COUNT ? ir_ops[n->op].name : "<bad op>");
  for (int i = 0; i < n->n_in; i++) {
    fputs(i ? ", " : " ", f);
    print_value(f, n->in[i]);
  }
  if (n->n_attrs > 0) {
    fputs(" {", f);
    for (int i = 0; i < n->n_attrs; i++) {
      fprintf(f, "%s%s=", i ? ", " : "", n->attrs[i].name);
      ir_print_attr_value(f, &n->attrs[i]);
    }
    fputc('}', f);
  }
  fputs(" :", f);
  for (int i = 0; i < n->n_out; i++) {
    fputs(i ? ", " : " ", f);
    print_type(f, &n->out[i].type);
  }
  if (n->keep_f32) fputs(" #f32", f);
  if (n->group >= 0) fprintf(f, " #k%d", n->group);
  print_guard(f, n->guard);
}

static void print_node(FILE *f, const Node *n) {
  if (!n->loc.file) {
    fputs("  ", f);
    print_node_body(f, n);
    fputc('\n', f);
    return;
  }
  /* The padding depends on the line's length, so the line is built in
   * memory first. */
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (m) {
    print_node_body(m, n);
    bool cut = ferror(m);
    if (fclose(m) != 0 || cut) {
      free(buf);
      buf = NULL;
    }
  }
  if (!buf) {
    fputs("  ", f);
    print_node_body(f, n);
    fputs("  ", f);
  } else {
    fprintf(f, "  %s", buf);
    long pad = (long)LOC_COLUMN - (long)(len + 2);
    if (pad < 2) pad = 2;
    fprintf(f, "%*s", (int)pad, "");
    free(buf);
  }
  fputs("; ", f);
  ir_put_comment_text(f, n->loc.file->name);
  fprintf(f, ":%d:%d\n", n->loc.line, n->loc.col);
}

void ir_print(FILE *f, Graph *g) {
  ir_number(g);
  fputs("; dlcc IR\ngraph ", f);
  const char *name = g->name ? g->name : "";
  if (is_identifier(name))
    fputs(name, f);
  else
    print_quoted(f, name);
  fputs(g->bounded && !g->output_length ? " bounded {\n" : " {\n", f);
  for (const Node *n = g->first; n; n = n->next) print_node(f, n);
  fputs("  return", f);
  for (int i = 0; i < g->n_outputs; i++) {
    fputs(i ? ", " : " ", f);
    print_value(f, g->outputs[i]);
    fputs(" as ", f);
    print_quoted(f, g->output_names ? g->output_names[i] : "");
    if (ir_output_update(g, i)) {
      fputs(" updates ", f);
      print_quoted(f, ir_output_update(g, i));
    }
    int axis, len = ir_output_length(g, i, &axis);
    if (len >= 0) {
      fprintf(f, " length %d ", axis);
      print_quoted(f, g->output_names ? g->output_names[len] : "");
    }
  }
  fputs("\n}\n", f);
}

char *ir_print_text(Graph *g) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return NULL;
  ir_print(f, g);
  bool cut = ferror(f);
  if (fclose(f) != 0 || cut) {
    free(text);
    return NULL;
  }
  return text;
}
