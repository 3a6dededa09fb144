/* Oar plugin ABI — (optional) collective communication, NCCL-shaped.
 *
 * A communicator spans `nranks` devices, in one process or several. Collectives are enqueued on the
 * given stream of the communicator's device; between group_start and group_end calls are batched and
 * may only complete together (so one host thread can drive every rank of a single-process group).
 */
#ifndef OAR_PLUGIN_CCL_H_
#define OAR_PLUGIN_CCL_H_

#include "oar/plugin/status.h"
#include "oar/plugin/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum oar_reduce_op {
  OAR_REDUCE_SUM = 0,
  OAR_REDUCE_PROD = 1,
  OAR_REDUCE_MAX = 2,
  OAR_REDUCE_MIN = 3,
  OAR_REDUCE_AVG = 4
} oar_reduce_op;

#define OAR_CCL_UNIQUE_ID_BYTES 128
/* Identifies one communicator being created; rank 0 makes it, the host distributes it. */
typedef struct oar_ccl_unique_id_t {
  uint8_t bytes[OAR_CCL_UNIQUE_ID_BYTES];
} oar_ccl_unique_id_t;

typedef struct oar_ccl_comm_st* oar_ccl_comm_t;

/* Host-provided key/value store for bootstrapping multi-process groups (may be NULL for single-process
 * groups). `get` blocks until the key exists or timeout_ms passes (DEADLINE_EXCEEDED). */
typedef struct oar_ccl_kv_store_t {
  size_t struct_size;
  const void* ext;
  void* context;
  oar_status_t* (*set)(void* context, const char* key, const void* value, size_t size);
  oar_status_t* (*get)(void* context, const char* key, void* value, size_t capacity,
                       size_t* size /* out */, int64_t timeout_ms);
} oar_ccl_kv_store_t;
#define OAR_CCL_KV_STORE_STRUCT_SIZE OAR_STRUCT_SIZE(oar_ccl_kv_store_t, get)

typedef struct oar_ccl_api_t {
  size_t struct_size;
  const void* ext;
  oar_status_t* (*get_unique_id)(oar_ccl_unique_id_t* id /* out */);
  oar_status_t* (*comm_init_rank)(int32_t device, int32_t nranks, const oar_ccl_unique_id_t* id,
                                  int32_t rank, const oar_ccl_kv_store_t* store /* may be NULL */,
                                  oar_ccl_comm_t* comm /* out */);
  oar_status_t* (*comm_destroy)(oar_ccl_comm_t comm);
  oar_status_t* (*all_reduce)(const void* send, void* recv, size_t count, int32_t dtype,
                              int32_t reduce_op, oar_ccl_comm_t comm, oar_stream_t stream);
  oar_status_t* (*broadcast)(const void* send, void* recv, size_t count, int32_t dtype, int32_t root,
                             oar_ccl_comm_t comm, oar_stream_t stream);
  oar_status_t* (*reduce)(const void* send, void* recv, size_t count, int32_t dtype, int32_t reduce_op,
                          int32_t root, oar_ccl_comm_t comm, oar_stream_t stream);
  /* recv holds nranks * send_count elements. */
  oar_status_t* (*all_gather)(const void* send, void* recv, size_t send_count, int32_t dtype,
                              oar_ccl_comm_t comm, oar_stream_t stream);
  /* send holds nranks * recv_count elements. */
  oar_status_t* (*reduce_scatter)(const void* send, void* recv, size_t recv_count, int32_t dtype,
                                  int32_t reduce_op, oar_ccl_comm_t comm, oar_stream_t stream);
  /* (optional) send and recv hold nranks * count elements. */
  oar_status_t* (*all_to_all)(const void* send, void* recv, size_t count, int32_t dtype,
                              oar_ccl_comm_t comm, oar_stream_t stream);
  oar_status_t* (*send)(const void* buf, size_t count, int32_t dtype, int32_t peer, oar_ccl_comm_t comm,
                        oar_stream_t stream);
  oar_status_t* (*recv)(void* buf, size_t count, int32_t dtype, int32_t peer, oar_ccl_comm_t comm,
                        oar_stream_t stream);
  oar_status_t* (*group_start)(void);
  oar_status_t* (*group_end)(void);
} oar_ccl_api_t;
#define OAR_CCL_API_STRUCT_SIZE OAR_STRUCT_SIZE(oar_ccl_api_t, group_end)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OAR_PLUGIN_CCL_H_ */
