/* fuse.h: kernel fusion planning (internal to src/compiler; fuse.c).
 *
 * tpu_fuse_plan groups the nodes of a graph into fused kernel steps:
 *   - chains of float elementwise ops (unary, binary, compare, select, clamp, convert) of
 *     one shape, whose inputs may be broadcasts, reshapes and other views;
 *   - a head (REDUCE, DOT_GENERAL, CONVOLUTION) with an elementwise epilogue on its result
 *     (bias, activation, residual, scaling of a mean), and for REDUCE a prologue: the
 *     elementwise chain that computes the reduced operand (softmax's exp(x - max), layer
 *     norm's (x - mean)^2), computed chunk by chunk and never written whole.
 * A node joins its users' group only if every user is in that group and it is not an
 * output, so a group has one result (its root, the last node) and no intermediate value
 * is needed outside it. Groups are found in one backward sweep: linear time. Then
 * multi-output fusion merges a plain elementwise group whose root is an output read only
 * by another plain group of its shape into that group, as one of its stores: the step
 * writes the value to its output too (AdamW's new moments and parameter in one pass).
 * Then row-wise fusion attaches to a REDUCE group the elementwise group computing its
 * operand (side) and one reading its result broadcast over the rows (tail), so softmax and
 * layer norm run in two kernels, row chunk by row chunk.
 */
#ifndef TPU_COMPILER_FUSE_H
#define TPU_COMPILER_FUSE_H

#include "compiler/executable.h"

#define FUSE_MAX_HEAD_IN 2
#define FUSE_MAX_INPUTS (FUSE_MAX_HEAD_IN + 4 * TPU_EW_PROGRAM_MAX_INPUTS)
#define FUSE_EXT_CAP 12 /* outside inputs a plain group tracks exactly */

typedef struct fuse_group {
  tpu_value_t root;        /* the last node: the group's value, the step's position */
  tpu_value_t head;        /* REDUCE / DOT_GENERAL / CONVOLUTION, or TPU_NO_VALUE */
  tpu_value_t head_out;    /* what the epilogue reads: the head, or a reshape of it (keepdim) */
  tpu_value_t reshape;     /* a reshape member waiting for its head to join, or none */
  int num_pre, num_post;   /* members by role (the head not counted) */
  int pre_ext, post_ext;   /* upper bounds of each program's external inputs */
  int first, count;        /* members (all roles, node order) in plan->members */
  int fused;               /* index into plan->fused, or -1: runs unfused */
  int side, tail;          /* groups run inside this one's step (row-wise fusion), or -1 */
  int attached;            /* the group whose step runs this one, or -1 */
  int num_stores;          /* members that are outputs (POST, no head), stored by the step */
  int num_ext;             /* a plain group: its distinct outside inputs, or -1 (unknown) */
  tpu_value_t ext[FUSE_EXT_CAP];
} fuse_group_t;

enum { FUSE_PRE, FUSE_POST, FUSE_SIDE, FUSE_TAIL };

typedef struct fuse_step {
  int group;                             /* in plan->groups */
  fused_t f;                             /* the step's layout (views filled by compile) */
  int prog[4];                           /* FUSE_*: index into plan->progs, or -1 */
  int num_inputs;
  tpu_value_t inputs[FUSE_MAX_INPUTS];   /* the step's input values, in fused_t's order */
  tpu_value_t side_root, tail_root;      /* values the step also writes, or TPU_NO_VALUE */
  bool side_private;                     /* only this step reads side_root */
  int num_stores;                        /* the post program's stores: */
  tpu_value_t stores[TPU_EW_PROGRAM_MAX_STORES]; /* values also written (node order) */
} fuse_step_t;

typedef struct fuse_plan {
  int n;
  int *group_of;           /* (n) group index or -1 */
  unsigned char *role;     /* (n) fuse_role */
  fuse_group_t *groups;
  int num_groups;
  int *members;            /* (n) */
  fuse_step_t *fused;      /* (num_fused) */
  int num_fused;
  tpu_ew_program_t *progs; /* (num_progs) the programs of the fused steps, grown by doubling */
  int num_progs, cap_progs;
  tpu_allocator_t host;
  tpu_status_t status;     /* first allocation failure while building programs */
  bool *needed;            /* (n) the value is read by a step or is an output */
  bool *stored;            /* (n) an output computed inside a group (one of its stores) */
} fuse_plan_t;

/* Plans fusion for |g| (fusion on: every node; |enabled| false: no groups, every node
 * needed, which reproduces the unfused compile). */
tpu_status_t tpu_fuse_plan(const tpu_graph_t *g, bool enabled, tpu_allocator_t host,
                           fuse_plan_t *plan);
void tpu_fuse_plan_free(fuse_plan_t *plan, tpu_allocator_t host);

/* Whether |n| is an elementwise node a fused program can compute (float ops on f32, bf16
 * or f16; COMPARE and SELECT with their predicates). */
bool tpu_fuse_elementwise(const tpu_graph_t *g, const tpu_node_t *n);
/* The fused step whose root is |v|, or NULL. */
const fuse_step_t *tpu_fuse_step_at(const fuse_plan_t *plan, tpu_value_t v);
/* Whether |v| is computed inside a fused step (and has no value of its own, unless the
 * step stores it: tpu_fuse_stored). */
bool tpu_fuse_internal(const fuse_plan_t *plan, tpu_value_t v);
/* Whether |v| is computed inside a fused step that also writes it (a store). */
bool tpu_fuse_stored(const fuse_plan_t *plan, tpu_value_t v);
/* Whether |v| is computed by another group's step (internal, or an attached group's
 * root, whose value the host step writes). */
bool tpu_fuse_elsewhere(const fuse_plan_t *plan, tpu_value_t v);

#endif /* TPU_COMPILER_FUSE_H */
