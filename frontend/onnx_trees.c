/* The tree ensembles of ONNX's ML domain (ai.onnx.ml): TreeEnsemble
 * (opset 5) and the older TreeEnsembleRegressor and
 * TreeEnsembleClassifier that scikit-learn's, XGBoost's and LightGBM's
 * converters write.  Every tree is walked by gathers over tables of its
 * nodes, one step a level.  Takes one node's operands, returns its
 * results. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* ---- TreeEnsemble (ai.onnx.ml 5) ---- */

/* Levels of the deepest tree the walk unrolls: boosted trees have tens,
 * an unpruned decision tree on hard data some hundreds; a crafted chain
 * of tens of thousands would take minutes to compile. */
enum { TREE_MAX_DEPTH = 4096 };

enum { TREE_LEQ, TREE_LT, TREE_GTE, TREE_GT, TREE_EQ, TREE_NEQ, TREE_MEMBER, TREE_MODES };
enum { TREE_AVERAGE, TREE_SUM, TREE_MIN, TREE_MAX };

/* A list-of-integers attribute of any length (ox_attr_ints takes at most
 * 64); *n -1 when absent. */
static bool tree_ints(Imp *im, const char *name, bool required, int64_t *n, const int64_t **v) {
  const Onnx__AttributeProto *a = ox_find_attr(im, name);
  *n = -1, *v = NULL;
  if (!a) return !required || ox_bad(im, "attribute '%s' is required", name);
  if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS)
    return ox_bad(im, "attribute '%s' must be a list of integers", name);
  *n = (int64_t)a->n_ints, *v = a->ints;
  return true;
}

/* A tensor attribute as doubles (malloc'd in *out, which the caller
 * frees); *n -1 when absent. */
static bool tree_values(Imp *im, const char *name, bool required, int64_t *n, double **out) {
  const Onnx__AttributeProto *a = ox_find_attr(im, name);
  *n = -1, *out = NULL;
  if (!a) return !required || ox_bad(im, "attribute '%s' is required", name);
  if (!a->t) return ox_bad(im, "attribute '%s' must be a tensor", name);
  Tensor t;
  char err[512];
  if (!ox_tensor_from_proto(a->t, im->dir, &t, err, sizeof err)) return ox_bad(im, "%s: %s", name, err);
  int64_t k = ir_type_numel(&t.type);
  double *v = k > 0 ? malloc(sizeof *v * (size_t)k) : NULL;
  if (k > 0 && !v) {
    ir_tensor_free(&t);
    return ox_bad(im, "%s: out of memory", name);
  }
  for (int64_t i = 0; i < k; i++) v[i] = ir_tensor_get(&t, i);
  ir_tensor_free(&t);
  *n = k, *out = v;
  return true;
}

/* The tree's attributes, checked: every index in range, every tree
 * finite (depth: the most nodes a path from a root evaluates). */
typedef struct Trees {
  int64_t n_nodes, n_leaves, n_trees, n_targets, n_features, depth;
  const int64_t *feature, *true_id, *false_id, *true_leaf, *false_leaf, *leaf_target, *roots, *tracks;
  double *splits, *modes, *leaf_weight, *members;
  int64_t n_members;
  int64_t aggregate, post;
} Trees;

static void trees_free(Trees *t) {
  free(t->splits), free(t->modes), free(t->leaf_weight), free(t->members);
}

/* Node i goes to the same leaf either way: a leaf (the degenerate tree). */
static bool tree_is_leaf(const Trees *t, int64_t i) {
  return t->true_leaf[i] && t->false_leaf[i] && t->true_id[i] == t->false_id[i];
}

/* The most nodes a path from a root evaluates, each node's depth found
 * once (subtrees may be shared: walking every path could take
 * exponential time on a crafted file); a node met again while its own
 * subtree is open is a cycle. */
static bool tree_depths(Imp *im, Trees *t) {
  int64_t n = t->n_nodes;
  /* entries of (node, phase): phase 0 opens the node, 1 closes it */
  int64_t *stack = malloc(sizeof *stack * (size_t)(6 * n + 6)), *depth = calloc((size_t)n + 1, sizeof *depth);
  char *state = calloc((size_t)n + 1, 1); /* 0 unseen, 1 open, 2 done */
  bool ok = stack && depth && state;
  if (!ok) ox_bad(im, "out of memory");
  t->depth = 1;
  for (int64_t r = 0; ok && r < t->n_trees; r++) {
    int64_t sp = 0;
    stack[sp++] = t->roots[r], stack[sp++] = 0;
    while (ok && sp) {
      int64_t i = stack[sp - 2], phase = stack[sp - 1];
      sp -= 2;
      if (phase == 1) {
        int64_t d = 0;
        for (int side = 0; side < 2 && !tree_is_leaf(t, i); side++) {
          int64_t c = side ? t->false_id[i] : t->true_id[i];
          if (!(side ? t->false_leaf[i] : t->true_leaf[i]) && depth[c] > d) d = depth[c];
        }
        depth[i] = d + 1, state[i] = 2;
        if (depth[i] > t->depth) t->depth = depth[i];
        continue;
      }
      if (state[i]) continue; /* done by another path */
      state[i] = 1;
      stack[sp++] = i, stack[sp++] = 1;
      for (int side = 0; side < 2 && !tree_is_leaf(t, i); side++) {
        int64_t c = side ? t->false_id[i] : t->true_id[i];
        if (side ? t->false_leaf[i] : t->true_leaf[i]) continue;
        if (state[c] == 1) {
          ok = ox_bad(im, "node %" PRId64 " of the tree at root %" PRId64 " leads back to itself: a tree has no cycles",
                      c, t->roots[r]);
          break;
        }
        if (!state[c]) stack[sp++] = c, stack[sp++] = 0;
      }
    }
  }
  free(stack), free(depth), free(state);
  if (ok && t->depth > TREE_MAX_DEPTH)
    return ox_bad(im, "the deepest tree has %" PRId64 " levels, more than the %d dlcc walks (each level is a step of the "
                      "compiled walk)", t->depth, TREE_MAX_DEPTH);
  return ok;
}

static bool trees_read(Imp *im, Trees *t) {
  int64_t n[8];
  const int64_t **ints[8] = {&t->feature, &t->true_id, &t->false_id, &t->true_leaf, &t->false_leaf,
                             &t->leaf_target, &t->roots, &t->tracks};
  static const char *const names[8] = {"nodes_featureids", "nodes_truenodeids", "nodes_falsenodeids", "nodes_trueleafs",
                                       "nodes_falseleafs", "leaf_targetids", "tree_roots",
                                       "nodes_missing_value_tracks_true"};
  for (int k = 0; k < 8; k++)
    if (!tree_ints(im, names[k], k < 7, &n[k], ints[k])) return false;
  int64_t n_splits, n_modes, n_weights;
  if (!tree_values(im, "nodes_splits", true, &n_splits, &t->splits) ||
      !tree_values(im, "nodes_modes", true, &n_modes, &t->modes) ||
      !tree_values(im, "leaf_weights", true, &n_weights, &t->leaf_weight) ||
      !tree_values(im, "membership_values", false, &t->n_members, &t->members) ||
      !ox_attr_int(im, "n_targets", -1, &t->n_targets) || !ox_attr_int(im, "aggregate_function", TREE_SUM, &t->aggregate) ||
      !ox_attr_int(im, "post_transform", 0, &t->post))
    return false;
  ox_find_attr(im, "nodes_hitrates"); /* a hint for the order of evaluation: nothing to compute */
  t->n_nodes = n[0], t->n_leaves = n[5], t->n_trees = n[6];
  for (int k = 1; k < 8; k++)
    if (k != 5 && k != 6 && n[k] >= 0 && n[k] != t->n_nodes)
      return ox_bad(im, "%s has %" PRId64 " values but nodes_featureids %" PRId64, names[k], n[k], t->n_nodes);
  if (n_splits != t->n_nodes || n_modes != t->n_nodes)
    return ox_bad(im, "nodes_splits and nodes_modes need %" PRId64 " values each (one a node), not %" PRId64 " and %" PRId64,
                  t->n_nodes, n_splits, n_modes);
  if (n_weights != t->n_leaves)
    return ox_bad(im, "leaf_weights has %" PRId64 " values but leaf_targetids %" PRId64, n_weights, t->n_leaves);
  if (t->n_nodes < 1 || t->n_trees < 1 || t->n_leaves < 1)
    return ox_bad(im, "an ensemble needs nodes, leaves and tree_roots");
  if (t->n_targets < 1 || t->n_targets > (1 << 20))
    return ox_bad(im, "n_targets must be from 1 to %d, not %" PRId64, 1 << 20, t->n_targets);
  if (t->aggregate < TREE_AVERAGE || t->aggregate > TREE_MAX)
    return ox_bad(im, "aggregate_function %" PRId64 " is not one of 0 (average), 1 (sum), 2 (min), 3 (max)", t->aggregate);
  if (t->post != 0 && t->post != 1 && t->post != 2)
    return ox_bad(im, "post_transform %" PRId64 " is not supported (0 none, 1 softmax and 2 logistic are)", t->post);
  int64_t member_nodes = 0, nan_marks = 0;
  for (int64_t i = 0; i < t->n_nodes; i++) {
    double m = t->modes[i];
    if (!(m >= 0 && m < TREE_MODES) || m != (int64_t)m)
      return ox_bad(im, "node %" PRId64 ": mode %g is not one of 0 to 6", i, m);
    member_nodes += m == TREE_MEMBER && !tree_is_leaf(t, i);
    for (int side = 0; side < 2; side++) {
      int64_t id = side ? t->false_id[i] : t->true_id[i], bound = (side ? t->false_leaf : t->true_leaf)[i] ? t->n_leaves
                                                                                                          : t->n_nodes;
      if (id < 0 || id >= bound)
        return ox_bad(im, "node %" PRId64 ": its %s %s %" PRId64 " is out of range (%" PRId64 " of them)", i,
                      side ? "false" : "true", bound == t->n_leaves ? "leaf" : "node", id, bound);
    }
    if (!tree_is_leaf(t, i) && (t->feature[i] < 0 || t->feature[i] >= t->n_features))
      return ox_bad(im, "node %" PRId64 ": feature %" PRId64 " is out of range for X's %" PRId64 " features", i,
                    t->feature[i], t->n_features);
  }
  for (int64_t i = 0; i < t->n_leaves; i++)
    if (t->leaf_target[i] < 0 || t->leaf_target[i] >= t->n_targets)
      return ox_bad(im, "leaf %" PRId64 ": target %" PRId64 " is out of range for n_targets %" PRId64, i,
                    t->leaf_target[i], t->n_targets);
  for (int64_t r = 0; r < t->n_trees; r++)
    if (t->roots[r] < 0 || t->roots[r] >= t->n_nodes)
      return ox_bad(im, "tree_roots[%" PRId64 "] = %" PRId64 " is out of range (%" PRId64 " nodes)", r, t->roots[r],
                    t->n_nodes);
  for (int64_t i = 0; i < t->n_members; i++) nan_marks += isnan(t->members[i]);
  if (member_nodes && nan_marks != member_nodes)
    return ox_bad(im, "membership_values must hold one set, ended by NaN, for each of the %" PRId64
                      " set-membership nodes (it has %" PRId64 ")", member_nodes, nan_marks);
  return tree_depths(im, t);
}

/* Gathers table[cur] (a known [E] or [E, K] table) for indices cur. */
static Val *tree_at(Imp *im, Val *table, Val *cur) { return ox_gather(im, table, cur, 0); }

/* The branch modes the ensemble's nodes use: where there are several,
 * is_mode[m] flags the table entries of mode m (built once, read at
 * every level); where one, only its comparison is made. */
typedef struct TreeModes {
  bool used[TREE_MODES];
  int n_used;
  Val *is_mode[TREE_MODES];
} TreeModes;

static void tree_modes(Imp *im, const Trees *t, TreeModes *tm) {
  *tm = (TreeModes){0};
  for (int64_t i = 0; i < t->n_nodes; i++)
    if (!tree_is_leaf(t, i) && !tm->used[(int)t->modes[i]]) tm->used[(int)t->modes[i]] = true, tm->n_used++;
  int64_t e = t->n_nodes + t->n_leaves;
  TensorType ty = ir_type_make(TY_BOOL, 1, &e);
  for (int m = 0; tm->n_used > 1 && m < TREE_MODES; m++) {
    if (!tm->used[m]) continue;
    tm->is_mode[m] = ox_known_new(im, &ty);
    for (int64_t i = 0; i < e; i++) ((uint8_t *)tm->is_mode[m]->k->data)[i] = i < t->n_nodes && t->modes[i] == m;
  }
}

/* The condition each [N, T] position's node takes on its feature value
 * xv and split thr: per mode that occurs, as its nodes' flags say. */
static Val *tree_condition(Imp *im, const TreeModes *tm, Val *cur, Val *xv, Val *thr, Val *member_table) {
  static const OpKind cmp[TREE_MEMBER] = {OP_LESS_EQUAL, OP_LESS, OP_GREATER_EQUAL, OP_GREATER, OP_EQUAL, OP_NOT_EQUAL};
  if (!tm->n_used) return ox_scalar(im, 1, TY_BOOL); /* every tree a leaf: either side leads there */
  Val *cond = NULL;
  int64_t dims[3] = {xv->type.dims[0], xv->type.dims[1], 1};
  for (int m = 0; m < TREE_MODES; m++) {
    if (!tm->used[m]) continue;
    Val *c;
    if (m == TREE_MEMBER) { /* any of the node's set members equal to xv (NaN pads never do) */
      Val *eq = ox_op2(im, OP_EQUAL, ox_reshape(im, xv, 3, dims), tree_at(im, member_table, cur));
      c = ox_op2s(im, OP_GREATER, ox_reduce(im, OP_REDUCE_MAX, ox_cast(im, eq, TY_F32), 1, (int64_t[]){2}, false), 0);
    } else {
      c = ox_op2(im, cmp[m], xv, thr);
    }
    if (tm->is_mode[m]) c = ox_op2(im, OP_LOGICAL_AND, c, tree_at(im, tm->is_mode[m], cur));
    cond = cond ? ox_op2(im, OP_LOGICAL_OR, cond, c) : c;
  }
  return cond;
}

/* Each tree walked from its root for the ensemble's depth as gathers over
 * tables of every node and leaf (a leaf leads to itself, so a shallower
 * tree waits at its leaf): the leaf each (sample, tree) reaches, [N, T],
 * numbered among the leaves. */
static Val *tree_leaves(Imp *im, Val *x, const Trees *t) {
  DType dt = x->type.dtype;
  int64_t N = x->type.dims[0], T = t->n_trees, E = t->n_nodes + t->n_leaves, F = t->n_features;
  /* tables over nodes then leaves: a node's feature, split and where each side leads; a leaf's own index */
  TensorType ti = ir_type_make(TY_I64, 1, &E), tf = ir_type_make(dt, 1, &E), tb = ir_type_make(TY_BOOL, 1, &E);
  Val *feature = ox_known_new(im, &ti), *split = ox_known_new(im, &tf), *to_true = ox_known_new(im, &ti),
      *to_false = ox_known_new(im, &ti), *tracks = ox_known_new(im, &tb);
  int64_t widest = 1, k = 0;
  for (int64_t i = 0, in_set = 0; i < t->n_members; i++) {
    in_set = isnan(t->members[i]) ? 0 : in_set + 1;
    if (in_set > widest) widest = in_set;
  }
  if (t->n_members > 0 && E * widest > im->fold_max) {
    ox_bad(im, "the set-membership table (%" PRId64 " nodes and leaves by the widest set's %" PRId64
               " members) is larger than dlcc builds at import", E, widest);
    return NULL;
  }
  int64_t md[2] = {E, widest};
  TensorType tm = ir_type_make(dt, 2, md);
  Val *members = t->n_members > 0 ? ox_known_new(im, &tm) : NULL;
  for (int64_t i = 0; members && i < E * widest; i++) ir_tensor_set(members->k, i, NAN);
  for (int64_t i = 0; i < E; i++) {
    bool node = i < t->n_nodes && !tree_is_leaf(t, i);
    int64_t self = i < t->n_nodes ? t->n_nodes + t->true_id[i] : i; /* a degenerate node: its leaf */
    ((int64_t *)feature->k->data)[i] = node ? t->feature[i] : 0;
    ir_tensor_set(split->k, i, node ? t->splits[i] : 0);
    ((int64_t *)to_true->k->data)[i] = node ? t->true_id[i] + (t->true_leaf[i] ? t->n_nodes : 0) : self;
    ((int64_t *)to_false->k->data)[i] = node ? t->false_id[i] + (t->false_leaf[i] ? t->n_nodes : 0) : self;
    ((uint8_t *)tracks->k->data)[i] = node && t->tracks && t->tracks[i];
    if (node && t->modes[i] == TREE_MEMBER)
      for (int64_t j = 0; k < t->n_members && !isnan(t->members[k]); k++, j++) ir_tensor_set(members->k, i * widest + j, t->members[k]);
    if (node && t->modes[i] == TREE_MEMBER) k++; /* past the set's NaN */
  }
  bool any_tracks = false;
  for (int64_t i = 0; t->tracks && i < t->n_nodes; i++) any_tracks |= t->tracks[i] && !tree_is_leaf(t, i);
  TreeModes modes;
  tree_modes(im, t, &modes);
  /* every (sample, tree) at its root, then depth steps down */
  Val *cur = ox_expand(im, ox_reshape(im, ox_ints_val(im, (int)T, t->roots), 2, (int64_t[]){1, T}), 2, (int64_t[]){N, T});
  Val *rows = ox_op2s(im, OP_MUL, ox_iota_along(im, 2, 0, N), (double)F);
  Val *flat = ox_reshape(im, x, 1, (int64_t[]){N * F});
  for (int64_t d = 0; d < t->depth && cur; d++) {
    Val *xv = ox_gather(im, flat, ox_op2(im, OP_ADD, rows, tree_at(im, feature, cur)), 0);
    Val *cond = xv ? tree_condition(im, &modes, cur, xv, tree_at(im, split, cur), members) : NULL;
    if (cond && any_tracks)
      cond = ox_op2(im, OP_LOGICAL_OR, cond, ox_op2(im, OP_LOGICAL_AND, ox_op1(im, OP_ISNAN, xv), tree_at(im, tracks, cur)));
    cur = cond ? ox_where(im, cond, tree_at(im, to_true, cur), tree_at(im, to_false, cur)) : NULL;
  }
  return cur ? ox_op2s(im, OP_SUB, cur, (double)t->n_nodes) : NULL;
}

/* Whether some tree reaches each target, [N, K], from hit [N, T, K]. */
static Val *tree_reached(Imp *im, Val *hit) {
  return ox_op2s(im, OP_GREATER, ox_reduce(im, OP_REDUCE_MAX, ox_cast(im, hit, TY_F32), 1, (int64_t[]){1}, false), 0);
}

/* The trees' values per sample and target, [N, K], from what each
 * (sample, tree) reached: w its weights and hit whether it names the
 * target, both [N, T, K] (w may be [N, T, 1] where one weight serves
 * every target it hits).  Summed, or averaged over the T trees, or their
 * min or max taken; a target no tree reaches is 0, as onnxruntime gives
 * it (the ONNX reference gives min and max the dtype's extremes there). */
static Val *tree_aggregate(Imp *im, Val *w, Val *hit, int64_t T, int64_t aggregate) {
  DType dt = w->type.dtype;
  if (aggregate == TREE_SUM || aggregate == TREE_AVERAGE) {
    Val *y = ox_reduce(im, OP_REDUCE_SUM, ox_where(im, hit, w, ox_scalar(im, 0, dt)), 1, (int64_t[]){1}, false);
    return y && aggregate == TREE_AVERAGE ? ox_op2s(im, OP_DIV, y, (double)T) : y;
  }
  /* the fill never wins where a tree reaches the target, and is 0 where none does */
  bool min = aggregate == TREE_MIN;
  Val *y = ox_reduce(im, min ? OP_REDUCE_MIN : OP_REDUCE_MAX, ox_where(im, hit, w, ox_scalar(im, min ? INFINITY : -INFINITY, dt)),
                     1, (int64_t[]){1}, false);
  Val *reached = tree_reached(im, hit);
  return y && reached ? ox_where(im, reached, y, ox_scalar(im, 0, dt)) : NULL;
}

/* TreeEnsemble: the leaves' weights into their targets' columns.  Where
 * onnxruntime and the ONNX reference differ it follows onnxruntime and
 * the spec (a root that is a leaf is that leaf, not leaf number root;
 * docs/onnx.md). */
bool ox_op_tree_ensemble(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x) return false;
  DType dt = x->type.dtype;
  if (!ir_dtype_is_float(dt)) return ox_bad(im, "X must be floating point");
  if (x->type.rank != 2) return ox_bad(im, "X must be 2-d, [N, features], not rank %d", x->type.rank);
  Trees t = {.n_features = x->type.dims[1]};
  if (!trees_read(im, &t)) return trees_free(&t), false;
  int64_t N = x->type.dims[0], T = t.n_trees;
  Val *leaf = tree_leaves(im, x, &t);
  TensorType tl = ir_type_make(dt, 1, &t.n_leaves);
  Val *weights = ox_known_new(im, &tl);
  for (int64_t i = 0; i < t.n_leaves; i++) ir_tensor_set(weights->k, i, t.leaf_weight[i]);
  Val *w = leaf ? ox_reshape(im, ox_gather(im, weights, leaf, 0), 3, (int64_t[]){N, T, 1}) : NULL;
  Val *target = leaf ? ox_reshape(im, ox_gather(im, ox_ints_val(im, (int)t.n_leaves, t.leaf_target), leaf, 0), 3,
                                  (int64_t[]){N, T, 1})
                     : NULL;
  Val *hit = target ? ox_op2(im, OP_EQUAL, target, ox_iota_along(im, 3, 2, t.n_targets)) : NULL;
  Val *y = hit ? tree_aggregate(im, w, hit, T, t.aggregate) : NULL;
  trees_free(&t);
  if (y && t.post == 2) y = ox_op1(im, OP_SIGMOID, y);
  if (y && t.post == 1) y = ox_ml_post(im, y, ML_POST_SOFTMAX);
  return (n->out[0] = y) != NULL;
}

/* ---- TreeEnsembleRegressor and TreeEnsembleClassifier (ai.onnx.ml 1 and 3) ---- */

/* A list-of-floats attribute NAME or its NAME_as_tensor (opset 3, for
 * doubles), as doubles in *out (malloc'd); *n -1 when neither is there. */
static bool legacy_values(Imp *im, const char *name, bool required, int64_t *n, double **out) {
  char tname[64];
  snprintf(tname, sizeof tname, "%s_as_tensor", name);
  const Onnx__AttributeProto *a = ox_find_attr(im, name), *t = ox_find_attr(im, tname);
  *n = -1, *out = NULL;
  if (t) {
    if (a && a->n_floats) return ox_bad(im, "'%s' and '%s' are both given", name, tname);
    return tree_values(im, tname, required, n, out);
  }
  if (!a || !a->n_floats) return !required || ox_bad(im, "attribute '%s' is required", name);
  double *v = malloc(sizeof *v * a->n_floats);
  if (!v) return ox_bad(im, "%s: out of memory", name);
  for (size_t i = 0; i < a->n_floats; i++) v[i] = a->floats[i];
  *n = (int64_t)a->n_floats, *out = v;
  return true;
}

/* A node of the file's own numbering: its tree and its id in the tree. */
typedef struct LegacyKey {
  int64_t tree, id, at; /* at: its position in the node lists */
} LegacyKey;

static int legacy_key_cmp(const void *a, const void *b) {
  const LegacyKey *x = a, *y = b;
  if (x->tree != y->tree) return x->tree < y->tree ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* The position of node (tree, id), or -1. */
static int64_t legacy_find(const LegacyKey *keys, int64_t n, int64_t tree, int64_t id) {
  LegacyKey k = {tree, id, 0};
  const LegacyKey *f = bsearch(&k, keys, (size_t)n, sizeof k, legacy_key_cmp);
  return f ? f->at : -1;
}

/* An ensemble of the older ops, turned into TreeEnsemble's tables (the
 * LEAF nodes its leaves, a one-node tree a node whose sides both lead to
 * it) and, per leaf, its weights per target or class (summed, or their
 * min or max as the aggregate asks) and whether it names each: [leaves,
 * K]. */
typedef struct Legacy {
  Trees t;
  int64_t *ints;     /* the arrays t's int lists point into */
  LegacyKey *keys;   /* the nodes by (tree, id), for the weights' lookups */
  int64_t n_keys;
  int64_t *slot;     /* a node's index among the interior nodes, or among the leaves */
  uint8_t *is_leaf;
  double *weight;    /* [leaves, K] */
  uint8_t *names;    /* [leaves, K] */
  int64_t K, aggregate, n_base, n_ids;
  double *base;
  bool all_positive; /* no weight below 0 */
} Legacy;

static void legacy_free(Legacy *l) {
  trees_free(&l->t);
  free(l->ints), free(l->weight), free(l->names), free(l->base), free(l->keys), free(l->slot), free(l->is_leaf);
}

/* The nodes' lists read and checked, their tables built. */
static bool legacy_nodes(Imp *im, Legacy *l) {
  Trees *t = &l->t;
  static const char *const names[6] = {"nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_truenodeids",
                                       "nodes_falsenodeids", "nodes_missing_value_tracks_true"};
  int64_t n[6];
  const int64_t *v[6];
  for (int k = 0; k < 6; k++)
    if (!tree_ints(im, names[k], k < 5, &n[k], &v[k])) return false;
  const Onnx__AttributeProto *ma = ox_find_attr(im, "nodes_modes");
  int64_t n_values;
  double *values = NULL;
  ox_find_attr(im, "nodes_hitrates"), ox_find_attr(im, "nodes_hitrates_as_tensor"); /* hints: nothing to compute */
  if (!legacy_values(im, "nodes_values", true, &n_values, &values)) return false;
  int64_t N = n[0];
  bool ok = N >= 1 && ma && (int64_t)ma->n_strings == N && n_values == N;
  for (int k = 1; ok && k < 6; k++) ok = n[k] == N || (k == 5 && n[k] < 0);
  if (!ok) {
    free(values);
    return ox_bad(im, "the nodes' lists (nodes_treeids, nodes_nodeids, nodes_featureids, nodes_modes, nodes_values, "
                      "nodes_truenodeids, nodes_falsenodeids, nodes_missing_value_tracks_true) need one value a node each");
  }
  const int64_t *tree = v[0], *id = v[1], *feature = v[2], *to_true = v[3], *to_false = v[4], *tracks = v[5];
  LegacyKey *keys = l->keys = malloc(sizeof *keys * (size_t)N);
  int64_t *slot = l->slot = malloc(sizeof *slot * (size_t)N);
  uint8_t *is_leaf = l->is_leaf = malloc((size_t)N);
  double *mode = malloc(sizeof *mode * (size_t)N);
  l->n_keys = N;
  if (!keys || !slot || !is_leaf || !mode) {
    free(mode), free(values);
    return ox_bad(im, "out of memory");
  }
  static const char *const mode_names[] = {"BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"};
  int64_t n_inner = 0, n_leaves = 0, n_trees = 0, lone = 0;
  for (int64_t i = 0; ok && i < N; i++) {
    const ProtobufCBinaryData *s = &ma->strings[i];
    mode[i] = -1;
    for (int m = 0; m < 6; m++)
      if (s->len == strlen(mode_names[m]) && memcmp(s->data, mode_names[m], s->len) == 0) mode[i] = m;
    bool leaf = s->len == 4 && memcmp(s->data, "LEAF", 4) == 0;
    is_leaf[i] = leaf;
    if (!leaf && mode[i] < 0) ok = ox_bad(im, "node %" PRId64 ": its mode is not BRANCH_LEQ, _LT, _GTE, _GT, _EQ, _NEQ or LEAF", i);
    slot[i] = leaf ? n_leaves++ : n_inner++;
    keys[i] = (LegacyKey){tree[i], id[i], i};
    if (i == 0 || tree[i] != tree[i - 1]) n_trees++, lone += leaf; /* a tree's first node is its root */
  }
  if (ok) qsort(keys, (size_t)N, sizeof *keys, legacy_key_cmp); /* a bad mode left keys unset */
  for (int64_t i = 1; ok && i < N; i++)
    if (legacy_key_cmp(&keys[i - 1], &keys[i]) == 0)
      ok = ox_bad(im, "node %" PRId64 " of tree %" PRId64 " is given twice", keys[i].id, keys[i].tree);
  /* interior nodes, then one per tree whose root is a leaf; roots; each an int list */
  int64_t NI = n_inner + lone, m = 0;
  l->ints = ok ? malloc(sizeof *l->ints * (size_t)(6 * NI + n_trees)) : NULL;
  t->splits = ok ? malloc(sizeof *t->splits * (size_t)NI) : NULL;
  t->modes = ok ? malloc(sizeof *t->modes * (size_t)NI) : NULL;
  if (ok && (!l->ints || !t->splits || !t->modes)) ok = ox_bad(im, "out of memory");
  if (ok) {
    int64_t *f = l->ints, *tt = f + NI, *ff = tt + NI, *tl = ff + NI, *fl = tl + NI, *tr = fl + NI, *roots = tr + NI;
    t->feature = f, t->true_id = tt, t->false_id = ff, t->true_leaf = tl, t->false_leaf = fl, t->tracks = tr,
    t->roots = roots;
    int64_t r = 0;
    for (int64_t i = 0; ok && i < N; i++) {
      bool leaf = mode[i] < 0, root = i == 0 || tree[i] != tree[i - 1];
      if (root) roots[r++] = leaf ? n_inner + m : slot[i];
      if (leaf && root) { /* a one-node tree: a node that leads to its leaf either way */
        int64_t j = n_inner + m++;
        f[j] = 0, tt[j] = ff[j] = slot[i], tl[j] = fl[j] = 1, tr[j] = 0, t->splits[j] = 0, t->modes[j] = TREE_LEQ;
      }
      if (leaf) continue;
      int64_t j = slot[i];
      f[j] = feature[i], t->splits[j] = values[i], t->modes[j] = mode[i], tr[j] = tracks && tracks[i];
      for (int side = 0; ok && side < 2; side++) {
        int64_t child_id = side ? to_false[i] : to_true[i], c = legacy_find(keys, N, tree[i], child_id);
        if (c < 0) {
          ok = ox_bad(im, "node %" PRId64 " of tree %" PRId64 ": its %s child %" PRId64 " is no node of the tree", id[i],
                      tree[i], side ? "false" : "true", child_id);
          break;
        }
        (side ? ff : tt)[j] = slot[c], (side ? fl : tl)[j] = mode[c] < 0;
      }
      if (ok && (feature[i] < 0 || feature[i] >= t->n_features))
        ok = ox_bad(im, "node %" PRId64 " of tree %" PRId64 ": feature %" PRId64 " is out of range for X's %" PRId64
                        " features", id[i], tree[i], feature[i], t->n_features);
    }
  }
  t->n_nodes = NI, t->n_leaves = n_leaves, t->n_trees = n_trees;
  if (ok && n_leaves < 1) ok = ox_bad(im, "the ensemble has no LEAF node");
  if (ok) ok = tree_depths(im, t);
  free(mode), free(values);
  return ok;
}

/* The weights' lists (PREFIX_ids, _nodeids, _treeids, _weights): each
 * weight added into its leaf's row of the [leaves, K] tables.  A weight
 * on a node that is not a leaf is never reached, and is dropped as
 * onnxruntime drops it. */
static bool legacy_weights(Imp *im, Legacy *l, const char *prefix) {
  char name[4][32];
  static const char *const suffix[4] = {"ids", "nodeids", "treeids", "weights"};
  for (int k = 0; k < 4; k++) snprintf(name[k], sizeof name[k], "%s_%s", prefix, suffix[k]);
  int64_t n[3], n_w;
  const int64_t *v[3];
  double *w;
  for (int k = 0; k < 3; k++)
    if (!tree_ints(im, name[k], true, &n[k], &v[k])) return false;
  if (!legacy_values(im, name[3], false, &n_w, &w)) return false;
  if (n_w < 0) n_w = 0;
  if (n[1] != n[0] || n[2] != n[0] || n_w != n[0]) {
    free(w);
    return ox_bad(im, "%s, %s, %s and %s need one value a weight each", name[0], name[1], name[2], name[3]);
  }
  int64_t L = l->t.n_leaves, K = l->K;
  if (K > im->fold_max / 8 / L) { /* 14 bytes an entry while the table is built twice */
    free(w);
    return ox_bad(im, "the weights' table (%" PRId64 " leaves by %" PRId64 " targets) is larger than dlcc builds at import", L, K);
  }
  l->weight = calloc((size_t)(L * K), sizeof *l->weight);
  l->names = calloc((size_t)(L * K), 1);
  if (!l->weight || !l->names) return free(w), ox_bad(im, "out of memory");
  l->all_positive = true;
  int64_t first = -1;
  l->n_ids = 0;
  for (int64_t j = 0; j < n[0]; j++) {
    int64_t c = legacy_find(l->keys, l->n_keys, v[2][j], v[1][j]), k = v[0][j];
    if (c < 0) {
      free(w);
      return ox_bad(im, "weight %" PRId64 " is of node %" PRId64 " of tree %" PRId64 ", which is no node", j, v[1][j], v[2][j]);
    }
    if (k < 0 || k >= K) {
      free(w);
      return ox_bad(im, "weight %" PRId64 ": %s %" PRId64 " is out of range (%" PRId64 " of them)", j, name[0], k, K);
    }
    if (first < 0) first = k, l->n_ids = 1;
    if (k != first) l->n_ids = 2; /* more than one: all that the binary rule asks */
    l->all_positive &= !(w[j] < 0);
    if (!l->is_leaf[c]) continue;
    /* a leaf's weights for one target add up, but min and max take each as a tree's own */
    int64_t at = l->slot[c] * K + k;
    double *cell = &l->weight[at];
    if (!l->names[at] || l->aggregate == TREE_SUM || l->aggregate == TREE_AVERAGE)
      *cell = l->names[at] ? *cell + w[j] : w[j];
    else
      *cell = l->aggregate == TREE_MIN ? fmin(*cell, w[j]) : fmax(*cell, w[j]);
    l->names[at] = 1;
  }
  free(w);
  return true;
}

/* X checked and as the walk takes it: its float dtype, integers as f32. */
static Val *legacy_x(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x) return NULL;
  if (x->type.dtype == TY_BOOL) return ox_bad(im, "X must be numbers, got bool"), NULL;
  if (x->type.rank != 2) return ox_bad(im, "X must be 2-d, [N, features], not rank %d", x->type.rank), NULL;
  if (x->type.dims[1] < 1) return ox_bad(im, "X has no features"), NULL;
  return ir_dtype_is_float(x->type.dtype) && x->type.dtype != TY_F16 && x->type.dtype != TY_BF16 ? x : ox_cast(im, x, TY_F32);
}

/* Every tree walked, and what each (sample, tree) reached looked up:
 * w its weights (f32, as onnxruntime sums them) and hit whether it names
 * the target, [N, T, K]. */
static bool legacy_reach(Imp *im, Val *x, Legacy *l, Val **w, Val **hit) {
  Val *leaf = tree_leaves(im, x, &l->t);
  int64_t dims[2] = {l->t.n_leaves, l->K};
  TensorType tw = ir_type_make(TY_F32, 2, dims), tn = ir_type_make(TY_BOOL, 2, dims);
  Val *weights = ox_known_new(im, &tw), *names = ox_known_new(im, &tn);
  for (int64_t i = 0; i < dims[0] * dims[1]; i++)
    ((float *)weights->k->data)[i] = (float)l->weight[i], ((uint8_t *)names->k->data)[i] = l->names[i];
  *w = leaf ? ox_gather(im, weights, leaf, 0) : NULL;
  *hit = leaf ? ox_gather(im, names, leaf, 0) : NULL;
  return *w && *hit;
}

/* The attributes both ops share, read; the nodes' tables built. */
static bool legacy_read(Imp *im, Val *x, Legacy *l, const char *prefix) {
  l->t.n_features = x->type.dims[1];
  bool ok = legacy_nodes(im, l) && legacy_weights(im, l, prefix) &&
            legacy_values(im, "base_values", false, &l->n_base, &l->base);
  if (l->n_base < 0) l->n_base = 0;
  return ok;
}

static Val *legacy_base(Imp *im, const Legacy *l) {
  TensorType ty = ir_type_make(TY_F32, 1, &l->n_base);
  Val *b = ox_known_new(im, &ty);
  for (int64_t i = 0; i < l->n_base; i++) ((float *)b->k->data)[i] = (float)l->base[i];
  return b;
}

/* TreeEnsembleRegressor: the targets' sums (or averages, mins or maxes)
 * over the trees, plus base_values, as onnxruntime 1.32 computes them:
 * of several targets, one that no tree reaches is 0, without its base
 * value; min and max take each of a leaf's weights as one; a post
 * transform applies to a single target only if it is PROBIT. */
bool ox_op_tree_ensemble_regressor(Imp *im, ONode *n) {
  Val *x = legacy_x(im, n);
  const char *agg;
  int post;
  Legacy l = {0};
  if (!x || !ox_attr_int(im, "n_targets", 0, &l.K) || !ox_attr_str(im, "aggregate_function", "SUM", &agg) ||
      !ox_ml_post_attr(im, &post))
    return false;
  static const char *const aggs[4] = {"AVERAGE", "SUM", "MIN", "MAX"};
  l.aggregate = -1;
  for (int i = 0; i < 4; i++)
    if (strcmp(agg, aggs[i]) == 0) l.aggregate = i;
  if (l.aggregate < 0) return ox_bad(im, "aggregate_function '%s' is not SUM, AVERAGE, MIN or MAX", agg);
  if (l.K < 1 || l.K > (1 << 20)) return ox_bad(im, "n_targets must be from 1 to %d, not %" PRId64, 1 << 20, l.K);
  Val *w, *hit, *y = NULL;
  if (legacy_read(im, x, &l, "target") && legacy_reach(im, x, &l, &w, &hit)) {
    if (l.n_base > 0 && l.n_base != l.K)
      ox_bad(im, "base_values has %" PRId64 " values for %" PRId64 " targets", l.n_base, l.K);
    else
      y = tree_aggregate(im, w, hit, l.t.n_trees, l.aggregate);
    if (y && l.n_base) y = ox_op2(im, OP_ADD, y, legacy_base(im, &l));
    if (y && l.K > 1) /* of several targets, one that no tree reaches is 0, its base value left out */
      y = ox_where(im, tree_reached(im, hit), y, ox_scalar(im, 0, TY_F32));
    if (y && (l.K > 1 || post == ML_POST_PROBIT)) y = ox_ml_post(im, y, post);
  }
  legacy_free(&l);
  return (n->out[0] = y) != NULL;
}

/* Two columns [N, 2] from a and b, each [N, 1]. */
static Val *legacy_pair(Imp *im, Val *a, Val *b) { return a && b ? ox_concat(im, 2, (Val *[]){a, b}, 1) : NULL; }

/* TreeEnsembleClassifier, as onnxruntime computes it (its rules for two
 * classes are its own: the ONNX reference differs where the weights
 * name one class and are not all positive, or name the second only).
 * Each class's weights are summed over the trees.  More than two
 * classes: plus base_values; the label is the class of the largest
 * score among those some tree (or a base value) gave one.  Two: a
 * model whose weights name one class is binary, its one score s the
 * second class's: the label is the second where s passes 0.5 (weights
 * all positive) or 0, and the scores are [1 - s, s] (all positive) or
 * [-s, s], turned by a logistic transform.  A base value is added only
 * to a score some tree gave (checked against onnxruntime 1.32). */
bool ox_op_tree_ensemble_classifier(Imp *im, ONode *n) {
  Val *x = legacy_x(im, n);
  int post;
  int64_t n_labels;
  const int64_t *labels;
  Legacy l = {0};
  if (!x || !ox_ml_post_attr(im, &post) || !ox_ml_labels(im, "classlabels_int64s", "classlabels_strings", &n_labels, &labels))
    return false;
  if (n_labels < 2) return ox_bad(im, "a classifier needs 2 or more class labels, not %" PRId64, n_labels);
  if (n_labels > (1 << 20)) return ox_bad(im, "%" PRId64 " class labels are too many", n_labels);
  l.K = n_labels, l.aggregate = TREE_SUM;
  Val *w, *hit, *label = NULL, *z = NULL;
  bool ok = legacy_read(im, x, &l, "class") && legacy_reach(im, x, &l, &w, &hit);
  if (ok && l.n_base > 0 && l.n_base != l.K && !(l.K == 2 && l.n_base == 1))
    ok = ox_bad(im, "base_values has %" PRId64 " values for %" PRId64 " classes", l.n_base, l.K);
  Val *s = ok ? tree_aggregate(im, w, hit, l.t.n_trees, TREE_SUM) : NULL;
  Val *has = ok ? tree_reached(im, hit) : NULL;
  Val *base = s && l.n_base ? legacy_base(im, &l) : NULL;
  Val *f0 = ox_scalar(im, 0, TY_F32), *labels_v = ox_ints_val(im, (int)l.K, labels);
  if (s && has && l.K > 2) {
    Val *p = base ? ox_op2(im, OP_ADD, s, base) : s;
    Val *masked = base ? p : ox_where(im, has, p, ox_scalar(im, -INFINITY, TY_F32));
    label = ox_gather(im, labels_v, ox_argmax(im, masked, 1, false), 0);
    z = ox_ml_post(im, p, post);
  } else if (s && has) {
    Val *s0 = ox_slice_axis(im, s, 1, 0, 1, 1), *s1 = ox_slice_axis(im, s, 1, 1, 2, 1);
    Val *h0 = ox_slice_axis(im, has, 1, 0, 1, 1), *h1 = ox_slice_axis(im, has, 1, 1, 2, 1);
    Val *p0 = s0, *p1 = s1, *two = h1; /* two: both scores kept (else the second is made from the first) */
    /* a base value is added only to a score some tree gave (the rest stay 0) */
    if (l.n_base == 2) { /* the second named: its base plus the FIRST's sum, the first its negative */
      Val *b0 = ox_slice_axis(im, base, 0, 0, 1, 1), *b1 = ox_slice_axis(im, base, 0, 1, 2, 1);
      Val *named = ox_op2(im, OP_ADD, s0, b1);
      p1 = ox_where(im, h1, named, f0);
      p0 = ox_where(im, h0, ox_where(im, h1, ox_op1(im, OP_NEG, named), ox_op2(im, OP_ADD, s0, b0)), f0);
      two = ox_scalar(im, 1, TY_BOOL);
    } else if (l.n_base == 1) {
      p0 = ox_where(im, h0, ox_op2(im, OP_ADD, s0, base), f0);
    }
    Val *pos = ox_where(im, h1, p1, ox_where(im, h0, p0, f0));
    Val *zeros = ox_expand(im, f0, 2, (int64_t[]){x->type.dims[0], 1});
    Val *neg_p0 = ox_op1(im, OP_NEG, p0), *win, *single;
    bool logistic = post == ML_POST_LOGISTIC;
    Val *logit = logistic ? legacy_pair(im, ox_op1(im, OP_SIGMOID, neg_p0), ox_op1(im, OP_SIGMOID, p0)) : NULL;
    if (l.n_ids == 1) { /* binary */
      win = ox_op2s(im, OP_GREATER, pos, l.all_positive ? 0.5 : 0);
      if (l.all_positive) { /* [1 - s, s], s through a logistic transform first */
        Val *sp = logistic ? ox_op1(im, OP_SIGMOID, p0) : p0;
        single = legacy_pair(im, ox_op2s(im, OP_SUB, ox_op1(im, OP_NEG, sp), -1), sp);
      } else
        single = logistic ? logit : legacy_pair(im, neg_p0, p0);
      label = ox_gather(im, ox_ints_val(im, 2, labels), ox_reshape(im, ox_cast(im, win, TY_I64), 1, &x->type.dims[0]), 0);
    } else { /* both named: the label 1 or 0 itself, whatever the labels */
      win = ox_op2s(im, OP_GREATER, pos, 0);
      if (l.n_base == 0)
        single = logistic ? logit : legacy_pair(im, neg_p0, p0);
      else
        single = legacy_pair(im, p0, zeros); /* onnxruntime writes the first score alone */
      label = ox_reshape(im, ox_cast(im, win, TY_I64), 1, &x->type.dims[0]);
    }
    /* onnxruntime writes probit(s) alone, leaving the second score as its buffer held it: 0 here */
    if (post == ML_POST_PROBIT) single = legacy_pair(im, ox_ml_post(im, p0, ML_POST_PROBIT), zeros);
    z = ox_where(im, two, ox_ml_post(im, legacy_pair(im, p0, p1), post), single);
  }
  legacy_free(&l);
  n->out[0] = label, n->out[1] = z;
  return label && z;
}
