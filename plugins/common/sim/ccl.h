// In-process collectives across the devices of one simulator (oar_ccl_api_t), NCCL-shaped.
//
// Without a key/value store every rank of a communicator lives in this process. A collective is enqueued
// on the rank's stream;
// when a rank's worker reaches it, the rank arrives at a rendezvous keyed by the communicator and the
// collective's sequence number; the last rank to arrive computes the result for everyone (reading
// every rank's send buffer, writing every rank's receive buffer) and releases the others. Sends are
// eager (the data is copied into a mailbox when the worker reaches the send); a receive waits for the
// matching message. Between group_start and group_end, calls are recorded and issued at group_end —
// communicator inits first, then sends, then everything else in call order — so one host thread can
// drive every rank. A rank that waits longer than OAR_SIM_CCL_TIMEOUT_MS (default 60 s) fails with
// DEADLINE_EXCEEDED and marks the communicator broken: later collectives on it fail at once.
//
// With a store (comm_init_rank's `store`), the ranks may be in several processes of one machine: rank 0
// creates a POSIX shared-memory segment named after the unique id and publishes its name through the store;
// collectives (all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all) then run through the
// segment in rounds of at most 4 MiB per rank, with process-shared futex barriers, computing with the same
// arithmetic in rank order (results bitwise equal to the in-process path) and the same simulated time. A
// rank that waits longer than the timeout breaks the segment with a message naming the missing ranks, which
// every rank then reports. send/recv go through a ring of two 1 MiB chunks per ordered pair of ranks
// (eager up to 2 MiB, as the in-process mailbox is; a larger send waits for its receiver).
//
// Supported dtypes: float32, float16, bfloat16 (reduced in float32, rounded once), int32, int64
// (wrapping). AVG divides the sum by nranks (integer division for integers).
#ifndef OAR_PLUGINS_COMMON_SIM_CCL_H_
#define OAR_PLUGINS_COMMON_SIM_CCL_H_

#include "oar/plugin/plugin.h"

namespace oar::sim {

/// Static table, valid for the process.
const oar_ccl_api_t* CclApi();

}  // namespace oar::sim

#endif  // OAR_PLUGINS_COMMON_SIM_CCL_H_
