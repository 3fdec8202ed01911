/*
 * executorch-tensorrt: the executor table, a plain C ABI between the native
 * adapter (libexecutorch_backend_tensorrt.so) and the executors that run a
 * TensorRT partition (Python executors installed on import, or an embedded
 * interpreter in a C++ process).
 *
 * Versioning: every struct starts with struct_size; the table carries
 * abi_version. The adapter refuses a table whose abi_version differs from
 * ETRT_EXECUTOR_ABI_VERSION or whose struct_size is smaller than it needs.
 * Fields appended to the end of a struct are optional: a reader uses one only
 * when the writer's struct_size covers it, so appending does not change
 * abi_version (native_plan below was appended this way). Changing or
 * reordering an existing field does.
 *
 * Return codes of the table's functions are ExecuTorch Error values
 * (0 = Ok). Before returning non-zero an executor records the cause with
 * etrt_set_last_error() (on the calling thread); the adapter prints it to
 * stderr.
 */
#ifndef EXECUTORCH_TENSORRT_EXECUTOR_TABLE_H
#define EXECUTORCH_TENSORRT_EXECUTOR_TABLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: plans with bounds may carry equal-dimension constraints (equal_dims),
 * which an adapter of version 1 would not read, matching calls it must not. */
#define ETRT_EXECUTOR_ABI_VERSION 2u

/* Kinds of delegate arguments. */
enum etrt_arg_kind {
  ETRT_ARG_TENSOR = 0,
  ETRT_ARG_INT = 1,
  ETRT_ARG_DOUBLE = 2,
  ETRT_ARG_BOOL = 3,
  ETRT_ARG_NONE = 4, /* None or a kind the adapter does not pass on */
};

/* Where a tensor's data lives. */
enum etrt_device_type {
  ETRT_DEVICE_CPU = 0,
  ETRT_DEVICE_CUDA = 1,
};

/* One delegate argument (input or output), as ExecuTorch passes it. */
typedef struct etrt_arg {
  uint32_t struct_size;   /* sizeof(etrt_arg) */
  int32_t kind;           /* etrt_arg_kind */
  int32_t is_input;       /* 1 for an input, 0 for an output */
  int32_t dtype;          /* ExecuTorch ScalarType code (same as c10) */
  void* data;             /* tensor data (host or device pointer) */
  uint64_t nbytes;        /* current size of data in bytes */
  int32_t ndim;
  int32_t device_type;    /* etrt_device_type */
  int32_t device_index;
  int32_t reserved0;
  const int32_t* sizes;   /* ndim entries; live view, updated by resize */
  const uint8_t* dim_order; /* ndim entries */
  int64_t int_value;      /* ETRT_ARG_INT / ETRT_ARG_BOOL */
  double double_value;    /* ETRT_ARG_DOUBLE */
  void* tensor;           /* opaque: pass to etrt_resize_tensor */
} etrt_arg;

/* One compile spec, as the program stores it. */
typedef struct etrt_compile_spec {
  const char* key;
  const void* value;
  uint64_t nbytes;
} etrt_compile_spec;

/* Looks up `key` in the program's named data (ExecuTorch's NamedDataMap:
 * the .pte's own segment and the .ptd passed at load). On success stores a
 * pointer to the bytes in *data and their size in *nbytes and returns 0; the
 * bytes are read-only (usually mapped from the file, not copied) and stay
 * valid until the adapter destroys the delegate. Call it only during init,
 * with the init args' named_data_ctx. On failure returns an Error code
 * (NotFound: no such key, or no named data at all) with the cause in
 * etrt_last_error. Asking for the same key twice returns the same bytes. */
typedef int32_t (*etrt_get_named_data_fn)(void* ctx, const char* key, const void** data,
                                          uint64_t* nbytes);

/* Everything init receives. */
typedef struct etrt_init_args {
  uint32_t struct_size;   /* sizeof(etrt_init_args) */
  uint32_t reserved0;
  const void* blob;       /* the processed blob, valid during init only */
  uint64_t blob_size;
  const etrt_compile_spec* compile_specs;
  uint64_t num_compile_specs;
  const char* method_name;  /* may be NULL */
  const char* fallback;     /* load-time backend option "fallback", or NULL */
  /* Appended (read them only when struct_size covers them): the program's
   * named data, where weights stored outside the blob live. */
  void* named_data_ctx;     /* pass to get_named_data; valid during init only */
  etrt_get_named_data_fn get_named_data;
  /* Appended for the GPU runtime (issue 14); read only when struct_size covers it. */
  const char* device;       /* load-time backend option "device" ("1", "cuda:1"; an int
                               option arrives as its decimal text), or NULL */
} etrt_init_args;

/* ---- Native plans: the steady-state path without the executor ----
 *
 * After a successful execute an executor may hand the adapter a plan: how to
 * run the same call again without calling the executor (no Python), and the
 * argument signature it was checked and bound for. The adapter runs a later
 * call itself only when every argument equals the signature, field by field
 * (kind, dtype, data pointer, nbytes, ndim, sizes, dim order, device type and
 * index: everything the executor's checks read); any difference sends the
 * call to the executor's execute, which checks and binds it again.
 *
 * Lifetime: the plan and every array it points to belong to the executor.
 * The adapter copies the signature when it receives the plan and keeps the
 * pointer to the plan. The plan stays valid until the adapter next calls the
 * executor's execute or destroy for that handle: the adapter forgets the plan
 * before either call (so an executor replaces or frees a plan only inside
 * them), and asks for a new one after an execute that returned 0; after one
 * that failed it asks too, but keeps only an any_address plan (one that
 * outlives calls; an executor returns NULL there unless its plan still
 * holds). Calls
 * into one handle never overlap (the adapter fails an overlapping call), so
 * no plan is read while execute or destroy runs. An executor that must stop
 * honouring a plan outside execute/destroy (interpreter exit) sets
 * `withdrawn` to non-zero, keeps the plan's memory readable, and releases the
 * rest; the adapter reads `withdrawn` before every run. Epochs (a CUDA-graph
 * plan's `epoch` and `state_epoch`) are the other way a plan stops outside
 * execute/destroy: once one moves on, the adapter sends every call to the
 * executor's execute until it hands out a new plan (the old one stays
 * readable until that execute, as above). */

/* Kinds of plan. */
enum etrt_plan_kind {
  ETRT_PLAN_ORT_RUN = 1, /* call onnxruntime's OrtApi::Run with bound OrtValues */
  ETRT_PLAN_CUDA_GRAPH = 2, /* launch a captured CUDA graph (etrt_cuda_graph_plan) */
};

/* ETRT_PLAN_CUDA_GRAPH: one host argument's staging copy. */
typedef struct etrt_staged_copy {
  uint64_t arg_index;     /* the delegate argument (host memory, its signature's nbytes) */
  uint64_t device;        /* CUdeviceptr of the staging buffer bound in the graph */
  uint64_t nbytes;        /* bytes copied (input: host -> device before the launch;
                             output: device -> host after it) */
} etrt_staged_copy;

/* ETRT_PLAN_CUDA_GRAPH: the TensorRT executor's captured enqueue, replayed by
 * the adapter through the CUDA driver it loads at run time. Handles are the
 * driver's (CUcontext, CUgraphExec, CUstream, CUevent), as integers. Per run:
 * make `context` current on the calling thread; record ready_event on
 * caller_stream and make `stream` wait for it; copy each staged input in on
 * `stream`; cuGraphLaunch(graph_exec, stream); then either (no staged output
 * and every argument in CUDA memory) record done_event on `stream` and make
 * caller_stream wait for it, returning without synchronizing the host, or
 * copy each staged output back on `stream` and synchronize `stream`.
 * The stream rule: caller_stream is the caller's stream the plan was made
 * for; the adapter always orders against it (a C++ caller has only the
 * legacy default stream, 0).
 * Liveness: the plan names executor memory another delegate may replace
 * outside this one's execute (a shared scratch area growing): when `epoch`
 * is not NULL the adapter runs the plan only while *epoch == epoch_at_plan. */
typedef struct etrt_cuda_graph_plan {
  uint32_t struct_size;   /* sizeof(etrt_cuda_graph_plan) */
  int32_t device_index;
  uint64_t context;
  uint64_t graph_exec;
  uint64_t stream;
  uint64_t caller_stream;
  uint64_t ready_event;
  uint64_t done_event;
  const etrt_staged_copy* staged_inputs;  /* num_staged_inputs entries */
  uint64_t num_staged_inputs;
  const etrt_staged_copy* staged_outputs; /* num_staged_outputs entries */
  uint64_t num_staged_outputs;
  const volatile uint64_t* epoch;         /* may be NULL */
  uint64_t epoch_at_plan;
  uint64_t* launches;     /* the adapter adds 1 per run (tests, tools); may be NULL */
  /* ---- Appended (issue 23, stateful partitions). Read only when
   * struct_size covers them; a shorter plan has no state. ----
   * The partition's own state (KV caches updated in place: the graph reads
   * and writes them at fixed addresses), executor-owned CUDA memory: each
   * entry's arg_index is the state's index, `device` its buffer, `nbytes`
   * its size (named so that a reader can tell what the plan keeps alive;
   * the adapter copies nothing). The cache positions are checked with the
   * plan's position_checks (etrt_native_plan) before anything is copied or
   * launched. A reset of the state moves *state_epoch on: the adapter runs
   * the plan only while *state_epoch == state_epoch_at_plan (when
   * state_epoch is not NULL), so the first call after a reset goes to the
   * executor, which re-plans. */
  const etrt_staged_copy* states;         /* num_states entries */
  uint64_t num_states;
  const volatile uint64_t* state_epoch;   /* may be NULL */
  uint64_t state_epoch_at_plan;
} etrt_cuda_graph_plan;

/* One argument as the plan was bound for it. Plans cover calls whose
 * arguments are all tensors (a scalar's value is not in the signature): the
 * adapter refuses a plan with another kind. */
typedef struct etrt_arg_signature {
  uint32_t struct_size;   /* sizeof(etrt_arg_signature) */
  int32_t kind;           /* etrt_arg_kind */
  int32_t dtype;
  int32_t ndim;
  int32_t device_type;
  int32_t device_index;
  void* data;
  uint64_t nbytes;
  const int32_t* sizes;   /* ndim entries (copied by the adapter) */
  const uint8_t* dim_order; /* ndim entries (copied by the adapter) */
} etrt_arg_signature;

/* OrtApi::Run, ReleaseStatus and GetErrorMessage, with onnxruntime's
 * opaque types as void (OrtStatus*, OrtSession*, OrtRunOptions*, OrtValue*). */
typedef void* (*etrt_ort_run_fn)(void* session, const void* run_options,
                                 const char* const* input_names,
                                 const void* const* inputs, size_t num_inputs,
                                 const char* const* output_names,
                                 size_t num_outputs, void** outputs);
typedef void (*etrt_ort_release_status_fn)(void* status);
typedef const char* (*etrt_ort_error_message_fn)(const void* status);

/* One cache whose write positions an argument holds (see "Position checks"). */
typedef struct etrt_position_check {
  uint32_t struct_size;   /* sizeof(etrt_position_check) */
  int32_t in_place;       /* non-zero: positions must also be contiguous */
  uint64_t arg_index;     /* the delegate input holding the int64 positions; its
                             count is its first dimension (1 for a 0-dim tensor) */
  int64_t capacity;       /* entries along the written axis (max cache length) */
  /* "state 'name' (axis A holds C positions)": the executor's description of
   * the cache, quoted in the errors. */
  const char* what;
} etrt_position_check;

/* One integer input whose values must lie in [lo, hi) (see "Index checks"). */
typedef struct etrt_index_check {
  uint32_t struct_size;   /* sizeof(etrt_index_check) */
  int32_t reserved0;
  uint64_t arg_index;     /* the delegate input (int32 or int64 on the host) */
  int64_t lo;             /* the half-open range eager PyTorch accepts */
  int64_t hi;
  const char* what;       /* "input 0 ('tokens')", quoted in the error */
  const char* advice;     /* what to do, quoted after the range */
} etrt_index_check;

/* How the adapter gets an output of a plan with bounds (see `bounds` below). */
enum etrt_output_rule {
  ETRT_OUTPUT_IN_PLACE = 0,  /* bound over the call's output memory (its shape fixed) */
  ETRT_OUTPUT_ALLOCATED = 1, /* onnxruntime allocates it; checked, resized and copied */
  ETRT_OUTPUT_FOLLOWS = 2,   /* its shape is a function of the inputs' (`follows`): the
                              * adapter resizes the output to it and binds it in place */
};

/* One argument's accepted shapes in a plan with bounds (issue 19). */
typedef struct etrt_arg_bounds {
  uint32_t struct_size;   /* sizeof(etrt_arg_bounds) */
  int32_t ndim;           /* the signature's rank */
  const int32_t* min;     /* ndim entries: smallest size per dimension (>= 0) */
  const int32_t* max;     /* ndim entries: largest (min == max: a static dimension) */
  uint64_t element_size;  /* bytes per element of the signature's dtype */
  int32_t output_rule;    /* etrt_output_rule (outputs; 0 for inputs) */
  int32_t reserved0;
  /* ETRT_OUTPUT_FOLLOWS (abi_version 2): 2 x ndim entries, per dimension
   * (input, dimension of that input) whose size it takes, or (-1, size) for
   * a static one. onnxruntime refuses a bound output whose shape differs
   * from the one it computes, so a wrong rule fails the call. NULL otherwise. */
  const int32_t* follows;
} etrt_arg_bounds;

/* Two delegate arguments' dimensions that must have one size (a plan with
 * bounds; see `equal_dims` below). */
typedef struct etrt_equal_dim {
  uint32_t struct_size;   /* sizeof(etrt_equal_dim) */
  int32_t dim_a;          /* a dimension of argument arg_a */
  uint64_t arg_a;
  uint64_t arg_b;
  int32_t dim_b;          /* ... equal to this dimension of argument arg_b */
  int32_t reserved0;
} etrt_equal_dim;

typedef struct etrt_native_plan {
  uint32_t struct_size;   /* sizeof(etrt_native_plan) */
  int32_t kind;           /* etrt_plan_kind; the adapter ignores a kind it does not know */
  volatile int32_t withdrawn; /* non-zero: do not run (see Lifetime above) */
  int32_t reserved0;
  uint64_t num_args;      /* must equal the delegate's inputs + outputs */
  const etrt_arg_signature* signature; /* num_args entries */
  /* ETRT_PLAN_ORT_RUN: run(session, run_options, input_names, inputs,
   * num_inputs, output_names, num_outputs, outputs); a non-NULL status is a
   * failure: its message is error_message(status), then release_status(status).
   * outputs are pre-bound OrtValues over the arguments' memory (fixed
   * shapes), or NULL (dynamic shapes: see the appended fields below). */
  etrt_ort_run_fn ort_run;
  etrt_ort_release_status_fn ort_release_status;
  etrt_ort_error_message_fn ort_error_message;
  void* session;
  const void* run_options; /* may be NULL */
  const char* const* input_names;
  const void* const* inputs;
  uint64_t num_inputs;
  const char* const* output_names;
  void** outputs;
  uint64_t num_outputs;
  /* ---- Appended (issue 13): stateful partitions and outputs of dynamic
   * shape. The adapter reads these fields only when struct_size covers
   * them; a plan whose struct_size stops before them has no state, no
   * position checks and no NULL outputs (the layout above). ----
   *
   * State: the last num_state_values entries of `inputs` and of `outputs` are
   * the partition's own state (KV caches): OrtValues over executor-owned
   * memory, bound for every call (an in-place state is the same OrtValue at
   * both ends). The delegate's arguments are then the first
   * num_inputs - num_state_values inputs and num_outputs - num_state_values
   * outputs, so those two counts add up to num_args.
   *
   * Position checks: before every run the adapter reads each check's
   * positions argument (int64 on the host; the signature guarantees its
   * address, dtype and shape) and refuses the call, with nothing run or
   * written, when a position lies outside the cache, the sequence is longer
   * than the cache, or an in-place cache's positions are not contiguous;
   * the cause goes to etrt_last_error in the executor's own words.
   *
   * NULL outputs: a delegate output whose entry in `outputs` is NULL has a
   * shape only the run knows (dynamic); onnxruntime allocates it, and the
   * adapter resizes the ExecuTorch output to its shape (etrt_resize_tensor),
   * copies the bytes in, releases the value and stores NULL back. */
  uint64_t num_state_values;
  const etrt_position_check* position_checks; /* num_position_checks entries */
  uint64_t num_position_checks;
  /* OrtApi GetTensorTypeAndShape, GetDimensionsCount, GetDimensions,
   * ReleaseTensorTypeAndShapeInfo, GetTensorMutableData, ReleaseValue:
   * needed (non-NULL) only when some output entry is NULL. */
  void* (*ort_get_tensor_type_and_shape)(const void* value, void** info);
  void* (*ort_get_dimensions_count)(const void* info, size_t* count);
  void* (*ort_get_dimensions)(const void* info, int64_t* dims, size_t count);
  void (*ort_release_tensor_type_and_shape_info)(void* info);
  void* (*ort_get_tensor_mutable_data)(void* value, void** data);
  void (*ort_release_value)(void* value);
  /* Where the adapter adds the bytes it copied into NULL outputs' arguments
   * (the executor's accounting, read by tests and tools); may be NULL. */
  uint64_t* copied_bytes;
  /* Functional (ping-pong) states, or NULL: alt_inputs / alt_outputs are
   * `inputs` / `outputs` with each such state's two buffers exchanged (the
   * same delegate entries, the same NULLs). The adapter runs the pair that
   * *swaps selects (even: inputs/outputs, odd: the alt pair) and adds 1 to
   * *swaps after every successful run, so the executor knows which buffer
   * holds each state's current value. */
  const void* const* alt_inputs;
  void** alt_outputs;
  uint64_t* swaps;
  /* ---- Appended (issue 23): ETRT_PLAN_CUDA_GRAPH reads only the fields
   * before num_state_values (struct_size, kind, withdrawn, num_args,
   * signature), position_checks / num_position_checks (a stateful
   * partition's cache positions: int64 host inputs, checked before every
   * run as above; num_state_values stays 0, the states are named in
   * etrt_cuda_graph_plan) and this one; the other ORT fields stay NULL.
   * Lifetime as above: the position checks' `what` strings and the state
   * buffers belong to the executor and stay valid as long as the plan. ---- */
  const etrt_cuda_graph_plan* cuda_graph;
  /* ---- Appended (issue 19): plans for any address. Read only when
   * struct_size covers them. any_address non-zero: a call matches on every
   * signature field but `data` (which must be non-NULL when nbytes > 0); the
   * adapter binds its own OrtValues over each call's delegate arguments with
   * ort_create_tensor (onnxruntime's CreateTensorWithDataAsOrtValue) using
   * ort_memory_info and element_types[k] (ONNX element type of delegate
   * argument k), releases them with ort_release_value, and runs with its own
   * copies of the value arrays (the user entries of inputs/outputs and of the
 * alt pair are then ignored; the state entries are used as they are). It may be
   * handed out right after init (the adapter asks then too), so the first
   * call runs without the executor. ---- */
  int32_t any_address;
  int32_t reserved1;
  void* (*ort_create_tensor)(const void* memory_info, void* data, size_t nbytes,
                             const int64_t* shape, size_t ndim, int32_t element_type,
                             void** value);
  const void* ort_memory_info;
  const int32_t* element_types; /* num_args entries */
  /* ---- Appended (issue 19, part 3): index checks. Read only when
   * struct_size covers them. Before every run the adapter reads each
   * check's input (int32/int64 host memory that the signature pins) and
   * refuses the call, with nothing run or written, when a value lies
   * outside [lo, hi) (ExecuTorch gets InvalidArgument; the cause, naming the
   * input, the value, its position and the range, goes to etrt_last_error).
   * A check the adapter cannot perform (another dtype, device memory, an
   * index past the delegate inputs) makes it refuse the plan. ---- */
  const etrt_index_check* index_checks; /* num_index_checks entries */
  uint64_t num_index_checks;
  /* ---- Appended (issue 19, part 2): any_address plans for dynamic shapes.
   * Read only when struct_size covers them. bounds non-NULL (any_address
   * set): a call matches when every argument has the signature's kind,
   * dtype, rank, device and dim order, each size lies within its bounds,
   * and its buffer holds the elements (nbytes >= element count x
   * element_size, data non-NULL when that is > 0); the signature's sizes and
   * nbytes are then ignored. The adapter binds each input (and each output
   * whose rule is ETRT_OUTPUT_IN_PLACE) over the call's memory with the
   * call's shape; an ETRT_OUTPUT_ALLOCATED output is a NULL entry that
   * onnxruntime allocates: after Run the adapter checks its element type
   * (ort_get_tensor_element_type), rank and bounds, resizes the ExecuTorch
   * output to it, checks the bytes against the output's buffer and copies
   * them in. State values, the ping-pong pair and position checks work as
   * in any plan; a position check then reads as many positions as the
   * call's first dimension of its argument says (refusing a buffer too
   * small for them). An adapter from before this refuses such plans, and
   * the executor runs those calls. ---- */
  const struct etrt_arg_bounds* bounds; /* num_args entries, or NULL */
  void* (*ort_get_tensor_element_type)(const void* info, int32_t* element_type);
  /* ---- Appended (issue 24; abi_version 2): equal dimensions. A plan with
   * bounds matches a call only when, for every entry, the two sizes are
   * equal (the export gave both one symbol: one position per token); a call
   * where they differ goes to the executor, which refuses it in its own
   * words. An entry naming an argument or dimension the signature does not
   * have makes the adapter refuse the plan. Ignored without bounds (exact
   * sizes already agree). ---- */
  const etrt_equal_dim* equal_dims; /* num_equal_dims entries */
  uint64_t num_equal_dims;
} etrt_native_plan;


typedef struct etrt_executor_table {
  uint32_t struct_size;   /* sizeof(etrt_executor_table) */
  uint32_t abi_version;   /* ETRT_EXECUTOR_ABI_VERSION */
  /* Returns 1 if the executors can run anything at all. */
  int32_t (*is_available)(void);
  /* Prepares a partition; stores an executor-owned handle in *handle and
   * the partition's input and output counts (the adapter checks them
   * against what ExecuTorch passes to execute). */
  int32_t (*init)(const etrt_init_args* args, uint64_t* handle,
                  uint32_t* num_inputs, uint32_t* num_outputs);
  /* Runs it. args holds the delegate's inputs, then its outputs. */
  int32_t (*execute)(uint64_t handle, etrt_arg* args, uint64_t num_args);
  /* Releases the handle. */
  void (*destroy)(uint64_t handle);
  /* Optional (appended; NULL, or beyond struct_size: no plans). Called right
   * after an execute of `handle` returned (0, or a failure: see Lifetime),
   * on the same thread: stores the
   * executor's plan for the call just made in *plan, or NULL for none
   * (dynamic output shapes, staged device memory, an executor without
   * plans). Returns 0, or an Error code (the adapter then uses no plan).
 * The adapter also calls it right after a successful init (a plan with
 * any_address set lets the first call run without the executor). */
  int32_t (*native_plan)(uint64_t handle, const etrt_native_plan** plan);
} etrt_executor_table;

/* ---- Exported by the adapter ---- */

/* Installs the executors (NULL uninstalls). Returns 0 or an Error code
 * (wrong abi_version, struct_size too small, a NULL function pointer; the
 * cause goes to etrt_last_error). The adapter copies the struct; the
 * functions it points to must stay callable while any delegate initialized
 * through them is alive (a delegate keeps the table it was created with). */
int32_t etrt_install_executor_table(const etrt_executor_table* table);

/* Resizes an output tensor (ExecuTorch resize_tensor); on success updates
 * arg->nbytes, ndim, sizes, dim_order and data. Fails (rank change, a
 * bounded tensor growing past its planned capacity) with an Error code and
 * the cause in etrt_last_error. */
int32_t etrt_resize_tensor(etrt_arg* arg, int32_t ndim, const int64_t* sizes);

/* The cause of the last failed call, per thread (like errno). The backend's
 * is_available, init and execute clear it when they start and when they
 * succeed, so after one of them it holds that call's cause or is empty.
 * Executors record their cause with etrt_set_last_error on the thread that
 * called them. A failure ExecuTorch reports without calling the backend (a
 * bad program file, a wrong number of inputs) changes nothing here.
 * etrt_last_error returns a copy, valid until the same thread calls it again. */
void etrt_set_last_error(const char* message);
const char* etrt_last_error(void);

/* Registration: 0 if this library holds "TensorRTBackend", else the
 * register_backend Error code; the message says who holds the name. */
int32_t etrt_registration_status(void);
const char* etrt_registration_message(void);

/* Checks a blob's fixed TR01 header and that its metadata and engine regions
 * lie inside it, as init does (the executors validate the metadata). Returns
 * 0 if sound; else non-zero with the reason in err (truncated to err_len). */
int32_t etrt_validate_blob(const void* data, uint64_t size, char* err,
                           uint64_t err_len);

/* What the adapter was built against (ABI guard). */
const char* etrt_built_executorch_version(void);
const char* etrt_built_executorch_git_version(void);
uint32_t etrt_executor_abi_version(void);

/* Whether the adapter would run `args` with `plan` (ETRT_PLAN_CUDA_GRAPH)
 * instead of calling the executor, without running anything or loading the
 * CUDA driver: 1 it would, 0 the arguments differ from the signature (or the
 * plan was withdrawn or its epoch moved), -1 the plan is refused (the cause
 * in etrt_last_error). For tests and tools. */
int32_t etrt_cuda_graph_plan_matches(const etrt_native_plan* plan, const etrt_arg* args,
                                     uint64_t num_args);
/* Adopts `plan` once and runs it up to `times` times on `args`, each run after
 * the adapter's signature check; returns the runs made, or -1 (cause in
 * etrt_last_error). The adapter's per-call work without ExecuTorch around it. */
int64_t etrt_cuda_graph_plan_replay(const etrt_native_plan* plan, const etrt_arg* args,
                                    uint64_t num_args, uint64_t times);

#ifdef __cplusplus
}
#endif

#endif
