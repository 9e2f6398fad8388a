/* ONNX's ML domain (ai.onnx.ml), the ops that are tensor arithmetic:
 * Binarizer, ArrayFeatureExtractor and TreeEnsemble (trees walked by
 * gathers), as the ONNX reference gives them.  Takes one node's
 * operands, returns its results. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* x > threshold as 1 or 0 in x's dtype. */
bool ox_op_binarizer(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  double threshold;
  if (!x || !ox_attr_float(im, "threshold", 0, &threshold)) return false;
  if (x->type.dtype == TY_BOOL) return ox_bad(im, "X must be numbers, got bool");
  Val *above = ox_op2(im, OP_GREATER, x, ox_scalar(im, threshold, x->type.dtype));
  return (n->out[0] = ox_cast(im, above, x->type.dtype));
}

/* X[..., Y] with Y's indices flattened (K of them): [..., K], or [1, K]
 * for a 1-d X.  The gather checks each index against X's last axis. */
bool ox_op_array_feature_extractor(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *y = ox_in_req(im, n, 1);
  if (!x || !y) return false;
  if (x->type.rank < 1) return ox_bad(im, "X must have at least one axis");
  if (ir_dtype_is_float(y->type.dtype) || y->type.dtype == TY_BOOL) return ox_bad(im, "Y must be integer indices");
  int64_t k = ir_type_numel(&y->type);
  Val *idx = ox_reshape(im, y, 1, &k);
  Val *g = ox_gather(im, x, idx, x->type.rank - 1);
  if (!g) return false;
  if (x->type.rank > 1) return (n->out[0] = g);
  int64_t dims[2] = {1, k};
  return (n->out[0] = ox_reshape(im, g, 2, dims));
}

/* ---- TreeEnsemble (ai.onnx.ml 5) ---- */

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

/* TreeEnsemble: each tree walked from its root for the ensemble's depth
 * as gathers over tables of every node and leaf (a leaf leads to itself,
 * so a shallower tree waits at its leaf), the leaves' weights summed, or
 * averaged, or their min or max taken per target; a target no tree
 * reaches is 0, as onnxruntime gives it (the ONNX reference gives min
 * and max the dtype's extremes there, and reads a root that is a leaf
 * as leaf number root, which onnxruntime and the spec do not). */
bool ox_op_tree_ensemble(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x) return false;
  DType dt = x->type.dtype;
  if (!ir_dtype_is_float(dt)) return ox_bad(im, "X must be floating point");
  if (x->type.rank != 2) return ox_bad(im, "X must be 2-d, [N, features], not rank %d", x->type.rank);
  Trees t = {.n_features = x->type.dims[1]};
  if (!trees_read(im, &t)) return trees_free(&t), false;
  int64_t N = x->type.dims[0], T = t.n_trees, E = t.n_nodes + t.n_leaves, F = t.n_features;
  /* tables over nodes then leaves: a node's feature, split and where each side leads; a leaf's own index */
  TensorType ti = ir_type_make(TY_I64, 1, &E), tf = ir_type_make(dt, 1, &E), tb = ir_type_make(TY_BOOL, 1, &E);
  Val *feature = ox_known_new(im, &ti), *split = ox_known_new(im, &tf), *to_true = ox_known_new(im, &ti),
      *to_false = ox_known_new(im, &ti), *tracks = ox_known_new(im, &tb);
  int64_t widest = 1, k = 0;
  for (int64_t i = 0, in_set = 0; i < t.n_members; i++) {
    in_set = isnan(t.members[i]) ? 0 : in_set + 1;
    if (in_set > widest) widest = in_set;
  }
  if (t.n_members > 0 && E * widest > im->fold_max) {
    trees_free(&t);
    return ox_bad(im, "the set-membership table (%" PRId64 " nodes and leaves by the widest set's %" PRId64
                      " members) is larger than dlcc builds at import", E, widest);
  }
  int64_t md[2] = {E, widest};
  TensorType tm = ir_type_make(dt, 2, md);
  Val *members = t.n_members > 0 ? ox_known_new(im, &tm) : NULL;
  for (int64_t i = 0; members && i < E * widest; i++) ir_tensor_set(members->k, i, NAN);
  for (int64_t i = 0; i < E; i++) {
    bool node = i < t.n_nodes && !tree_is_leaf(&t, i);
    int64_t self = i < t.n_nodes ? t.n_nodes + t.true_id[i] : i; /* a degenerate node: its leaf */
    ((int64_t *)feature->k->data)[i] = node ? t.feature[i] : 0;
    ir_tensor_set(split->k, i, node ? t.splits[i] : 0);
    ((int64_t *)to_true->k->data)[i] = node ? t.true_id[i] + (t.true_leaf[i] ? t.n_nodes : 0) : self;
    ((int64_t *)to_false->k->data)[i] = node ? t.false_id[i] + (t.false_leaf[i] ? t.n_nodes : 0) : self;
    ((uint8_t *)tracks->k->data)[i] = node && t.tracks && t.tracks[i];
    if (node && t.modes[i] == TREE_MEMBER)
      for (int64_t j = 0; k < t.n_members && !isnan(t.members[k]); k++, j++) ir_tensor_set(members->k, i * widest + j, t.members[k]);
    if (node && t.modes[i] == TREE_MEMBER) k++; /* past the set's NaN */
  }
  bool any_tracks = false;
  for (int64_t i = 0; t.tracks && i < t.n_nodes; i++) any_tracks |= t.tracks[i] && !tree_is_leaf(&t, i);
  TreeModes modes;
  tree_modes(im, &t, &modes);
  /* every (sample, tree) at its root, then depth steps down */
  Val *cur = ox_expand(im, ox_reshape(im, ox_ints_val(im, (int)T, t.roots), 2, (int64_t[]){1, T}), 2, (int64_t[]){N, T});
  Val *rows = ox_op2s(im, OP_MUL, ox_iota_along(im, 2, 0, N), (double)F);
  Val *flat = ox_reshape(im, x, 1, (int64_t[]){N * F});
  for (int64_t d = 0; d < t.depth && cur; d++) {
    Val *xv = ox_gather(im, flat, ox_op2(im, OP_ADD, rows, tree_at(im, feature, cur)), 0);
    Val *cond = xv ? tree_condition(im, &modes, cur, xv, tree_at(im, split, cur), members) : NULL;
    if (cond && any_tracks)
      cond = ox_op2(im, OP_LOGICAL_OR, cond, ox_op2(im, OP_LOGICAL_AND, ox_op1(im, OP_ISNAN, xv), tree_at(im, tracks, cur)));
    cur = cond ? ox_where(im, cond, tree_at(im, to_true, cur), tree_at(im, to_false, cur)) : NULL;
  }
  /* the leaves reached: their weights into their targets' columns */
  TensorType tl = ir_type_make(dt, 1, &t.n_leaves);
  Val *weights = ox_known_new(im, &tl);
  for (int64_t i = 0; i < t.n_leaves; i++) ir_tensor_set(weights->k, i, t.leaf_weight[i]);
  Val *leaf = cur ? ox_op2s(im, OP_SUB, cur, (double)t.n_nodes) : NULL;
  Val *w = leaf ? ox_reshape(im, ox_gather(im, weights, leaf, 0), 3, (int64_t[]){N, T, 1}) : NULL;
  Val *target = leaf ? ox_reshape(im, ox_gather(im, ox_ints_val(im, (int)t.n_leaves, t.leaf_target), leaf, 0), 3,
                                  (int64_t[]){N, T, 1})
                     : NULL;
  Val *hit = target ? ox_op2(im, OP_EQUAL, target, ox_iota_along(im, 3, 2, t.n_targets)) : NULL;
  Val *y = NULL;
  if (hit && (t.aggregate == TREE_SUM || t.aggregate == TREE_AVERAGE)) {
    y = ox_reduce(im, OP_REDUCE_SUM, ox_where(im, hit, w, ox_scalar(im, 0, dt)), 1, (int64_t[]){1}, false);
    if (y && t.aggregate == TREE_AVERAGE) y = ox_op2s(im, OP_DIV, y, (double)T);
  } else if (hit) {
    /* the fill never wins where a tree reaches the target, and is 0 where none does */
    bool min = t.aggregate == TREE_MIN;
    y = ox_reduce(im, min ? OP_REDUCE_MIN : OP_REDUCE_MAX, ox_where(im, hit, w, ox_scalar(im, min ? INFINITY : -INFINITY, dt)),
                  1, (int64_t[]){1}, false);
    Val *reached = ox_reduce(im, OP_REDUCE_MAX, ox_cast(im, hit, TY_F32), 1, (int64_t[]){1}, false);
    if (y && reached) y = ox_where(im, ox_op2s(im, OP_GREATER, reached, 0), y, ox_scalar(im, 0, dt));
  }
  trees_free(&t);
  if (y && t.post == 2) y = ox_op1(im, OP_SIGMOID, y);
  if (y && t.post == 1) {
    Emit e;
    Node *s = ox_begin(im, &e, OP_SOFTMAX, 1, &y);
    ir_set_int(im->g, s, "axis", 1);
    y = ox_emit1(im, &e);
  }
  return (n->out[0] = y) != NULL;
}
