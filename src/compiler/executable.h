/* executable.h: what a compiled program is made of (internal to src/compiler).
 *
 * A view says where a value lives and how to read it: a base (an input, an output or the
 * scratch block), an element offset from that base, and strides in elements. A step runs
 * one node's kernel from operand views into an output view; COPY steps move a value into
 * an output buffer (outputs that are parameters, views, or may alias inputs).
 */
#ifndef TPU_COMPILER_EXECUTABLE_H
#define TPU_COMPILER_EXECUTABLE_H

#include <stdatomic.h>
#include <stddef.h>

#include "tpu/compiler.h"
#include "tpu/kernels.h"
#include "tpu/passes.h"
#include "vtpu/kernels/ew_program.h"

typedef enum view_base { BASE_INPUT, BASE_OUTPUT, BASE_SCRATCH } view_base_t;

typedef struct view {
  view_base_t base;
  int index;                    /* input or output index */
  size_t scratch_offset;        /* bytes, BASE_SCRATCH */
  int64_t elem_offset;          /* elements from the base pointer */
  tpu_dtype_t dtype;
  int rank;
  int64_t dims[TPU_MAX_RANK];
  int64_t strides[TPU_MAX_RANK]; /* elements; 0 = broadcast, < 0 = reversed */
} view_t;

/* A view of a whole |shape| at |base| |index|: |strides| (elements), or dense row-major
 * strides when NULL (compile.c). */
view_t tpu_view_make(view_base_t base, int index, tpu_dtype_t dtype, const tpu_shape_t *shape,
                     const int64_t *strides);

typedef enum step_kind { STEP_NODE, STEP_COPY, STEP_FUSED } step_kind_t;

/* A fused step (fuse.c): an optional head (REDUCE, DOT_GENERAL or CONVOLUTION; its
 * attributes are the step's) with
 *   - a prologue program computing the REDUCE operand chunk by chunk (chunk_rows slices of
 *     dim 0 at a time into |chunk|, a small scratch buffer) so it never exists whole;
 *   - an epilogue program over the head's result in place (its input 0), or, without a
 *     head, the whole fused elementwise chain;
 *   - for REDUCE heads, row-wise fusion: a side program that writes a value the reduction
 *     reads (and others read later, e.g. softmax's exp(x - max)) and a tail program that
 *     reads the reduction's result broadcast back over the rows (softmax's division, layer
 *     norm's normalization), both run per chunk of rows, so the rows stay in cache.
 * Per chunk: side -> prologue -> reduce -> epilogue -> tail.
 * The step's inputs are, in order: the head's operands (none with a prologue or a side
 * computing the operand), then the prologue's, epilogue's (after its bound input 0),
 * side's and tail's inputs. */
typedef struct fused {
  bool has_head, has_pre, has_post, has_side, has_tail;
  int num_head_in;
  int pre_in, num_pre_in;      /* prologue inputs: in[pre_in ...] */
  int post_in, num_post_in;    /* epilogue inputs: in[post_in ...] */
  int side_in, num_side_in;
  int tail_in, num_tail_in;
  tpu_ew_program_t *pre, *post, *side, *tail; /* owned by the step; NULL when absent */
  bool head_reads_side;        /* the REDUCE operand is the side program's result */
  bool post_bias;              /* the epilogue is head + in[post_in] (a DOT_GENERAL's bias):
                                  the dot kernel adds it (tpu_kernel_dot_general_bias) */
  bool head_reshaped;          /* the head writes the out bytes with its own (dense) dims */
  int head_rank;
  int64_t head_dims[TPU_MAX_RANK];
  view_t side_out, tail_out;   /* where the side and tail results go (whole tensors) */
  int num_stores;              /* a headless chain's stores (post->stores): */
  view_t store_out[TPU_EW_PROGRAM_MAX_STORES]; /* where each goes */
  bool side_private;           /* no one else reads the side result: side_out is one chunk */
  uint64_t chunk_inputs;       /* bit i: input i is the private side result (one chunk) */
  view_t chunk;                /* prologue chunk: the REDUCE operand's dtype, dims[0] = chunk_rows */
  int64_t rows, chunk_rows;    /* the operand's dim 0, and the slices of it per chunk */
  int64_t row_elems;           /* the operand's elements per slice of dim 0 */
  int num_ops;
  tpu_op_t *ops;               /* (num_ops) the fused nodes' ops (describe) */
} fused_t;

typedef struct step {
  step_kind_t kind;
  tpu_op_t op;                  /* STEP_NODE: the node's op */
  tpu_value_t node;             /* for error messages */
  tpu_attrs_t attrs;            /* copied from the node */
  view_t out;
  int num_in;
  view_t *in;                   /* num_in operand views */
  fused_t *fused;               /* STEP_FUSED */
} step_t;

/* Which steps wait for which (deps.h): step i waits for num_preds[i] steps; when it
 * finishes, each of succ[succ_start[i] .. succ_start[i + 1]) waits for one fewer. */
typedef struct step_deps {
  int *num_preds;               /* (num_steps) */
  int *succ_start;              /* (num_steps + 1) */
  int *succ;                    /* (succ_start[num_steps]) step indices */
  int64_t (*out_range)[2];      /* (num_outputs) bytes [lo, hi) of each output from its pointer */
  /* the two-thread schedule (schedule.c) */
  int *order;                   /* (num_steps) thread 0's steps in run order, then thread 1's */
  int *wait;                    /* (num_steps) per position in |order|: steps of the other
                                   thread's list to be done before this one runs */
  int len0;                     /* steps in thread 0's list */
} step_deps_t;

/* Whether help pays, per executable (help_policy.c): this window's fastest run begun
 * alone [0] and with a helper [1] (ns; 0: none yet), how many of each the window has
 * seen, and how many runs are still to take no help. */
typedef struct help_policy {
  _Atomic uint64_t min_ns[2];
  _Atomic uint32_t count[2];
  _Atomic int32_t declines_left;
} help_policy_t;

/* Whether this run may take help (false: one of the declined runs, counted down by every
 * run). */
bool tpu_help_policy_accepts(help_policy_t *h);
/* Feeds a finished run (begun with a helper or not) into the window; once it holds
 * tpu_help_policy_window() runs of each kind, a verdict: if the fastest helped run was
 * slower than the fastest alone, the next tpu_help_policy_declined_runs() runs take no
 * help. */
void tpu_help_policy_note(help_policy_t *h, bool helped, uint64_t ns);
int tpu_help_policy_declined_runs(void);
int tpu_help_policy_window(void);

struct tpu_executable {
  atomic_int refcount;
  tpu_allocator_t host;
  int num_inputs, num_outputs;
  tpu_dtype_t *out_dtypes;      /* num_outputs */
  tpu_shape_t *out_shapes;      /* num_outputs */
  bool *out_strided;            /* num_outputs: the graph gave strides */
  int64_t (*out_strides)[TPU_MAX_RANK]; /* num_outputs */
  size_t scratch_bytes;         /* planned peak */
  size_t unplanned_bytes;       /* sum of all scratch buffers */
  int num_steps;
  step_t *steps;
  tpu_pass_stats_t pass_stats;  /* what the graph passes did */
  step_deps_t deps;
  bool parallel;                /* the schedule pays: tpu_executable_run goes to
                                   run_parallel.c while a helper spins */
  bool scratch_in_outputs;      /* some intermediates live in outputs not yet written (the
                                   outputs must not overlap: plan_memory.h) */
  /* the successful runs and their host time, ns (tpu_executable_run_stats): [0] begun with
   * no helper spinning in the pool, [1] with one; counted by runs of a const executable,
   * so atomic */
  _Atomic uint64_t runs[2], run_ns[2];
  _Atomic uint64_t shared_kernels; /* run_parallel.c: kernels split with a waiting thread */
  _Atomic uint64_t joined_runs;    /* runs begun alone whose steps a helper then shared */
  help_policy_t help;              /* whether the waiting thread's help pays */
};

/* Runs one step (execute.c). */
tpu_status_t tpu_step_run(const step_t *s, void *const *inputs, void *const *outputs,
                          void *scratch, tpu_pool_t *pool);

/* Runs all steps by the two-thread schedule in exe->deps: the caller and a helper spinning
 * in |pool| (now, or from some point of the run on) each take a list, or the caller runs
 * both (run_parallel.c). The steps' kernels split only between those two threads, so they
 * give the bits of a sequential run. |helper_steps| (optional): how many steps a thread
 * other than the caller ran. */
tpu_status_t tpu_run_parallel(const tpu_executable_t *exe, void *const *inputs,
                              void *const *outputs, void *scratch, tpu_pool_t *pool,
                              int64_t *helper_steps);

#endif /* TPU_COMPILER_EXECUTABLE_H */
