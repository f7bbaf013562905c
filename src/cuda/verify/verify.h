// The lossless verifier on the GPU (contract.md section 8; ops/verify.h): the same
// bits as the CPU reference (src/cpu/verify.cpp) for any row count, block size and
// vocabulary split.
//
// The three stages of ops/verify.h in three kernels on the caller's stream
// (src/cuda/verify/verify.cu; four more for method block), each stage (b) run by
// the CTA that arrives last of its group (an arrival counter per group, reset by
// that CTA, so a captured graph replays):
//   first    grid (items, S): each CTA reduces its vocabulary slice of one (row,
//            position) to the first-id packets of the target's and the draft's
//            raw logits (items = rows x (N + 1), S slices of `slice` ids; the
//            division by T is monotone: M = fdiv(raw M, T)). In the lists form
//            (VerifyShape::list_capacity > 0; rows with T > 0, bf16 logits) the
//            CTA instead counts its slice's ids by their 16-bit bf16 pattern in a
//            shared-memory histogram (65536 16-bit counts; a slice holds at most
//            65535 ids), takes the packet's value from the largest pattern seen
//            (its id matters only for a NaN, found by a scan of the slice then),
//            and writes the nonzero (pattern, count) pairs as the slice's list:
//            the sums pass then reads the list, not the logits (Zi is a sum of
//            count x term over the patterns, the same integers). A list longer
//            than list_capacity is not written and that slice's sums read the
//            logits, as do top-k / top-p targets and fp32 targets; the item's last CTA
//            (head) folds the S packets (the law's M, whether it is degenerate,
//            its first id where it reads it) and, where the row has top-k / top-p,
//            finds the kept set's threshold in the order (an exact radix selection
//            over the 64-bit order key, counts for top-k, exact 128-bit sums for
//            top-p);
//   sums     grid (items, S): each slice's exact 128-bit sums Zi of target (over
//            the kept set) and draft; the row's last CTA (decide) folds them, Z,
//            p_j(x_j), q_j(x_j), and the sequential decision (standard, or
//            block's weights w);
//   block    (method block) grid (rows x (N - 1), S) the residual masses R_i, then
//            one CTA per row for h_i and k;
//   draw     grid (rows, D): each draw slice's packet at position k (k < N: the
//            residual or block race; k == N: the target's race, the bonus); the
//            row's last CTA (finish) folds them (and, where the residual has no
//            mass, runs the target's race at k) and writes num_accepted and tokens
//            (padding rows untouched).
// The vocabulary passes read the logits 16 bytes a load; at T = 1 every pass skips
// the division (x / 1 is x); the sums add branch-free terms into a thread's 96-bit
// carry chain (select.h TermSum); the draw skips the noise of ids of weight 0 and, by
// two lower bounds of the noise, the Philox of ids whose weight cannot beat the
// thread's best score and the log of ids whose uniform cannot (select.h race_fold).
// Every combine is exact (packets by the order, sums in integers), so the slice
// width and the block size never change a bit; the tests run every block size the
// launcher can pick and several slice widths against the CPU reference.
//
// The resident form (VerifyShape::resident_rows > 0; src/cuda/verify/resident.cu):
// the same stages in one cooperative kernel, the logits read once. A request's G CTAs
// (G = ceil(V / slice)) each copy their slice of all 2N + 1 logit rows (the target's
// N + 1, the cache's N) into shared memory, and keep it there from the first-id
// packets through the sums (and block verification's masses) to the draw; between
// the stages the G CTAs meet at a barrier of their own (an arrival counter per row,
// spun on by one thread of each CTA). Every CTA then folds the group's partials itself
// (the same exact folds) and runs the sequential decision itself, so no CTA waits for
// another's result; the last to arrive after the draw finishes the row. The grid is
// resident_rows x G CTAs, launched cooperatively, so they are all resident at once
// and no barrier can wait on a CTA that has not started; group q takes the rows q,
// q + resident_rows, ... in turn. A row with top-k / top-p adds one barrier: its
// kept-set thresholds are found by the CTAs of its group, item j by CTA j mod G.
// The automatic pick takes it for up to kVerifyResidentUpToRows requests of standard
// verification, where its one launch beats the staged form's three (gpu-log 2026-12-05d
// run 3); from two requests, and for block verification, it is slower (its fixed cost a
// request: the CTAs' meetings and folds).
//
// No allocation and no host synchronization per call (the scratch is a
// VerifyWorkspace, sized when it is built), so a call can be captured in a CUDA
// graph. Values behind device pointers (tokens, slots, temperatures, top-k/top-p)
// are not read on the host: the API boundary validates them (validate_verify).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "sparkdraft/core/packet.h"
#include "sparkdraft/core/verify_math.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/ops/verify.h"

namespace sparkdraft::cuda {

// Threads per CTA of the vocabulary kernels (every size the launcher may pick).
inline constexpr int kVerifyThreadChoices[] = {64, 128, 256, 512};
inline constexpr int kVerifyMaxSlices = 64;        // default bound on the vocabulary slices
inline constexpr int kVerifyMaxDrawSlices = 256;   // bound on the draw kernel's slices
inline constexpr int kVerifyListsFromItems = 16;   // the automatic form: lists from this many items
inline constexpr int kVerifyResidentUpToRows = 1;  // the automatic form: resident up to these rows

// How one call is cut: `threads` per CTA of the vocabulary kernels, `slice` ids per
// vocabulary slice of first / sums / mass (S = ceil(V / slice) slices, at most the
// workspace's max_slices), `draw_slice` ids per slice of the draw kernel (one
// position per row: its own, narrower cut, at most kVerifyMaxDrawSlices slices).
// list_capacity: 0, every pass reads the logits (the rows form); > 0, the lists form
// above with lists of at most list_capacity (pattern, count) pairs per slice (needs
// slice <= kVerifyMaxListSlice and S x list_capacity <= the workspace's
// list_region()).
// draw_threads: threads per CTA of the draw kernel (0: `threads`).
// resident_rows > 0: the resident form above, `threads` per CTA, `slice` ids per CTA
// (G = ceil(V / slice) CTAs a request, at most the workspace's max_resident_slices(),
// their rows within the shared memory a CTA may have), resident_rows requests in flight
// (resident_rows x G CTAs, all resident at once on the GPU); draw_slice is unused and
// list_capacity must be 0.
struct VerifyShape {
  int threads = 256;
  int slice = 0;
  int draw_slice = 0;
  int list_capacity = 0;
  int draw_threads = 0;
  int resident_rows = 0;
};

// The forms of the vocabulary passes; automatic: the launcher's choice by rows.
enum class VerifyForm { automatic, rows, lists, resident };

inline constexpr int kVerifyResidentCtasPerSm = 2;  // the resident pick: CTAs an SM

inline constexpr int kVerifyMaxListSlice = 65535;  // a 16-bit count holds a slice's ids

// A (row, position, side) law between the kernels: its first-id packet and Z.
struct VerifyLaw {
  MarkovPacket first;
  float z;
  int32_t pad;
};

// The scratch of the verify kernels for up to max_rows rows of N drafts over V ids.
class VerifyWorkspace {
 public:
  VerifyWorkspace(int max_rows, int n, int vocab, int max_slices = kVerifyMaxSlices);
  int max_rows() const { return max_rows_; }
  int n() const { return n_; }
  int vocab() const { return vocab_; }
  int max_slices() const { return max_slices_; }
  // The launcher's shape for `rows` rows. Rows form: 256 threads, and slices (and
  // draw slices) narrow enough that about four CTAs per SM run even at one row (a row
  // alone fills the GPU). Lists form: 512 threads (one CTA an SM: the histogram is
  // 128 KB of shared memory), the fewest slices of at most kVerifyMaxListSlice ids
  // that fill the SMs in the fewest waves, lists of up to slice / 8 pairs; the draw at
  // 256 threads.
  // automatic: the resident form for up to kVerifyResidentUpToRows rows of standard
  // verification where one request fits (block verification is slower resident), else
  // the lists form when rows x (N + 1) items reach kVerifyListsFromItems, else the
  // rows form.
  // Resident form: 512 threads, two CTAs an SM where they fit
  // (else one), and of the requests in flight and the slice width the pair that takes
  // the fewest rounds of requests, each round's CTAs spread over its requests, the slice
  // a multiple of 8 ids (16-byte pieces of a bf16 row); InvalidArgument when even one
  // request does not fit in the GPU's shared memory.
  VerifyShape pick(int rows, VerifyForm form = VerifyForm::automatic,
                   LogitsDType target = LogitsDType::bf16,
                   VerifyMethod method = VerifyMethod::standard) const;
  // The resident form's bound on G, the CTAs of one request: what the workspace's
  // partials hold (kVerifyResidentCtasPerSm x the SMs).
  int max_resident_slices() const { return max_resident_slices_; }
  int sm_count() const { return sm_count_; }
  // Pairs of the lists form per (row, position, side): S x list_capacity must fit.
  int64_t list_region() const { return list_region_; }

  // S: the staged kernels' slices, or the resident form's G.
  DeviceBuffer<MarkovPacket> packets;  // [rows][N + 1][2][S] first-id packets (target, draft)
  DeviceBuffer<U128> sums;             // [rows][N + 1][2][S] Zi partials
  DeviceBuffer<U128> mass;             // [rows][N][S] block: R_i partials
  DeviceBuffer<MarkovPacket> draws;    // [rows][D] draw packets (D: draw slices, or G)
  DeviceBuffer<VerifyLaw> laws;        // [rows][N + 1][2]
  DeviceBuffer<uint64_t> keep;         // [rows][N + 1] target's kept-set threshold key (0: all)
  DeviceBuffer<float> weights;         // [rows][N + 1] block: w_i
  DeviceBuffer<float> chosen_weight;   // [rows] block: w_k after the decision
  DeviceBuffer<int32_t> accepted;      // [rows] k
  DeviceBuffer<int64_t> emitted;       // [rows] T = 0: the greedy pick
  DeviceBuffer<uint32_t> arrivals;     // [rows][N + 1] + 3 x [rows]: 0 between calls
  // The lists form's pairs (about V / 2 bytes per (row, position, side): 1.2 MB a row at
  // V 151936 and N 7).
  DeviceBuffer<uint32_t> lists;         // [rows][N + 1][2][list_region]: pattern << 16 | count
  DeviceBuffer<uint32_t> list_lengths;  // [rows][N + 1][2][S]: pairs (> capacity: not written)

 private:
  int max_rows_, n_, vocab_, max_slices_, sm_count_ = 1, max_resident_slices_ = 1;
  int64_t list_region_ = 0;
};

// Queues the verification of p (every pointer a device pointer) on `stream`:
// p.check(), then InvalidArgument when p exceeds the workspace (rows, N, V) or the
// shape is not one the launcher can run (threads one of kVerifyThreadChoices, slice
// >= 1 with at most max_slices slices). shape null: ws.pick(p.rows, automatic, p.target_dtype,
// p.method).
void verify(const ops::VerifyParams& p, VerifyWorkspace& ws, cudaStream_t stream,
            const VerifyShape* shape = nullptr);

namespace detail {
// The resident form's parts (resident.cu). Dynamic shared memory of one CTA holding
// `slice` ids of the 2N + 1 rows of a request; the kernel's attributes (set once by
// the workspace); the resident CTAs an SM holds at `threads` and `smem` (the occupancy
// calculator; 0: none fits); and the launch, after verify()'s checks of p and the
// workspace.
size_t resident_smem_bytes(int n, int slice, LogitsDType target);
void resident_prepare();
int resident_occupancy(int threads, size_t smem);
void resident_launch(const ops::VerifyParams& p, VerifyWorkspace& ws, const VerifyShape& shape,
                     cudaStream_t stream);
}  // namespace detail

}  // namespace sparkdraft::cuda
