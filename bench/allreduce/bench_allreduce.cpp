// The TP all-reduce benchmark (bench_allreduce.h): seeded partials and the host
// tree, the bit-for-bit check of our all_reduce_sum, the count of ncclAllReduce's
// differing bits, both collectives captured and timed per rank, the JSON.
#include "allreduce/bench_allreduce.h"

#if defined(SPARKDRAFT_HAVE_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/comm/peer_reduce.h"
#include "cuda/common/graph.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/reduce.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/nccl_comm.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
namespace {

struct Case {
  int rows = 0, hidden = 0;
  size_t count() const { return static_cast<size_t>(rows) * static_cast<size_t>(hidden); }
};

// The partials of every rank of one case: x * 2^e, x in [-1, 1), e in [-14, 14]
// (mixed magnitudes: rank order would give other bits from 3 ranks on), and
// their sums in the tree of core/reduce.h.
struct CaseInputs {
  std::vector<std::vector<float>> partials;  // [tp_rank][count]
  std::vector<float> tree;
};

uint64_t case_seed(uint64_t seed, int tp, const Case& c) {
  return seed + 1000003ull * static_cast<uint64_t>(tp) + 7919ull * static_cast<uint64_t>(c.rows) +
         static_cast<uint64_t>(c.hidden);
}

CaseInputs make_inputs(uint64_t seed, int tp, const Case& c) {
  std::mt19937_64 gen(case_seed(seed, tp, c));
  std::uniform_real_distribution<float> x(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-14, 14);
  CaseInputs in;
  in.partials.assign(static_cast<size_t>(tp), std::vector<float>(c.count()));
  for (auto& p : in.partials)
    for (float& v : p) v = std::ldexp(x(gen), e(gen));
  in.tree.resize(c.count());
  std::vector<float> p(static_cast<size_t>(tp));
  for (size_t i = 0; i < c.count(); ++i) {
    for (int r = 0; r < tp; ++r) p[static_cast<size_t>(r)] = in.partials[static_cast<size_t>(r)][i];
    in.tree[i] = canonical_tree_sum(p.data(), tp);
  }
  return in;
}

bool same_float(float a, float b) {
  return f32_bits(a) == f32_bits(b) || (std::isnan(a) && std::isnan(b));
}

// The median over `repeats` launches of `graph` (after `warmup`), each started
// after a host barrier of the group so that the ranks begin together.
double time_graph(NcclComm& comm, const GraphExec& graph, cudaStream_t stream, const EventPair& ev,
                  int warmup, int repeats) {
  std::vector<double> us;
  for (int i = 0; i < warmup + repeats; ++i) {
    comm.barrier();
    const double t = event_time_us(stream, ev, [&] { graph.launch(stream); });
    if (i >= warmup) us.push_back(t);
  }
  return median(us);
}

}  // namespace

AllReduceBenchReport bench_allreduce(const AllReduceBenchOptions& o, std::ostream& out) {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess) {
    (void)cudaGetLastError();
    device_count = 0;
  }
  if (o.tp_sizes.empty() || o.rows.empty() || o.hidden.empty())
    throw InvalidArgument("bench_allreduce: the TP sizes, rows and hidden sizes must not be empty");
  for (int tp : o.tp_sizes)
    if (tp < 2 || tp > device_count)
      throw InvalidArgument("bench_allreduce: tp " + std::to_string(tp) + " needs 2 to " +
                            std::to_string(device_count) + " ranks (one per GPU; " +
                            std::to_string(device_count) + " GPUs here)");
  for (int v : o.rows)
    if (v < 1) throw InvalidArgument("bench_allreduce: rows must be >= 1");
  for (int v : o.hidden)
    if (v < 1) throw InvalidArgument("bench_allreduce: hidden must be >= 1");
  if (o.repeats < 1 || o.warmup < 0)
    throw InvalidArgument("bench_allreduce: repeats must be >= 1, warmup >= 0");

  std::vector<Case> cases;
  size_t max_count = 0;
  for (int h : o.hidden)
    for (int r : o.rows) {
      cases.push_back({r, h});
      max_count = std::max(max_count, cases.back().count());
    }

  AllReduceBenchReport report;
  report.nccl_version = nccl_version();
  NcclOptions nopt;
  nopt.max_reduce_count = max_count;
  nopt.timeout_s = o.timeout_s;

  for (int tp : o.tp_sizes) {
    std::vector<CaseInputs> inputs;
    inputs.reserve(cases.size());
    for (const Case& c : cases) inputs.push_back(make_inputs(o.seed, tp, c));
    // [tp_rank][case] medians; a case's numbers come from every rank.
    std::vector<std::vector<double>> ours(static_cast<size_t>(tp)), theirs(ours), fused(ours);
    std::vector<int64_t> nccl_differ(cases.size(), 0);
    size_t timed = cases.size();
    GpuInfo gpu;
    std::mutex mu;
    std::vector<int> devices(static_cast<size_t>(tp));
    for (int r = 0; r < tp; ++r) devices[static_cast<size_t>(r)] = r;

    run_nccl_group(
        devices,
        [&](NcclComm& comm) {
          const int r = comm.tp_rank();
          DeviceStream stream;
          const cudaStream_t s = stream.get();
          EventPair ev;
          if (r == 0) {
            gpu = query_gpu();
            gpu.sm_clock_seen_mhz = measure_sm_clock_mhz(2000000);
          }
          DeviceBuffer<int> flag(1), flags(static_cast<size_t>(tp));
          // The fused all-reduce, where every rank's GPU reaches its peers.
          PeerReduceOptions po;
          po.max_count = max_count;
          po.timeout_s = o.timeout_s;
          PeerAllReduce peer(r, tp, po);
          const std::string why = peer.connect_group(comm);
          const bool fused_runs = why.empty();
          if (!fused_runs) {
            std::lock_guard lock(mu);
            if (report.fused_why.empty())
              report.fused_why = "rank " + std::to_string(r) + ": " + why;
          }
          for (size_t k = 0; k < cases.size(); ++k) {
            const Case& c = cases[k];
            const size_t count = c.count();
            const CaseInputs& in = inputs[k];
            DeviceBuffer<float> orig(in.partials[static_cast<size_t>(r)], s), data(count),
                nccl_out(count);
            // Ours, eagerly, against the host tree.
            SD_CUDA_CHECK(cudaMemcpyAsync(data.data(), orig.data(), count * sizeof(float),
                                          cudaMemcpyDeviceToDevice, s));
            comm.all_reduce_sum(data.data(), count, s);
            const std::vector<float> got = data.download(s);
            int64_t bad = -1;
            for (size_t i = 0; i < count && bad < 0; ++i)
              if (!same_float(got[i], in.tree[i])) bad = static_cast<int64_t>(i);
            // The fused one, on a fresh copy of the same partials.
            std::string which = "all_reduce_sum";
            std::vector<float> fused_got;
            if (fused_runs && bad < 0) {
              SD_CUDA_CHECK(cudaMemcpyAsync(data.data(), orig.data(), count * sizeof(float),
                                            cudaMemcpyDeviceToDevice, s));
              peer.all_reduce_sum(data.data(), count, s);
              fused_got = data.download(s);
              peer.check();
              for (size_t i = 0; i < count && bad < 0; ++i)
                if (!same_float(fused_got[i], in.tree[i])) bad = static_cast<int64_t>(i);
              if (bad >= 0) which = "the fused all-reduce";
            }
            const std::vector<float>& shown = which == "all_reduce_sum" ? got : fused_got;
            // NCCL's all-reduce of the same partials: how often its bits differ.
            comm.enqueue("ncclAllReduce", [&] {
              return ncclAllReduce(orig.data(), nccl_out.data(), count, ncclFloat32, ncclSum,
                                   comm.handle(), s);
            });
            const std::vector<float> nccl_got = nccl_out.download(s);
            int64_t differ = 0;
            for (size_t i = 0; i < count; ++i) differ += !same_float(nccl_got[i], in.tree[i]);
            // Every rank learns whether any rank differed, and all stop together.
            const int mine = bad >= 0 ? 1 : 0;
            flag.upload(&mine, 1, 0, s);
            comm.all_gather(flag.data(), flags.data(), sizeof(int), s);
            const std::vector<int> all = flags.download(s);
            if (bad >= 0) {
              std::ostringstream os;
              os << which << " != the tree at tp " << tp << ", rows " << c.rows << ", hidden "
                 << c.hidden << ": rank " << r << ", element " << bad << ": found 0x" << std::hex
                 << f32_bits(shown[static_cast<size_t>(bad)]) << ", expected 0x"
                 << f32_bits(in.tree[static_cast<size_t>(bad)]) << std::dec << " (seed " << o.seed
                 << ", case seed " << case_seed(o.seed, tp, c) << ")";
              std::lock_guard lock(mu);
              if (report.difference.empty()) report.difference = os.str();
            }
            if (std::any_of(all.begin(), all.end(), [](int f) { return f != 0; })) {
              std::lock_guard lock(mu);
              timed = std::min(timed, k);
              return;
            }
            if (r == 0) nccl_differ[k] = differ;

            // Both in a CUDA graph, in place on the same buffer (the sums grow by
            // about tp per launch, toward infinity: the timing does not care).
            const GraphExec our_graph(
                s, [&](cudaStream_t st) { comm.all_reduce_sum(data.data(), count, st); });
            const GraphExec nccl_graph(s, [&](cudaStream_t st) {
              comm.enqueue("ncclAllReduce", [&] {
                return ncclAllReduce(data.data(), data.data(), count, ncclFloat32, ncclSum,
                                     comm.handle(), st);
              });
            });
            const double our_us = time_graph(comm, our_graph, s, ev, o.warmup, o.repeats);
            const double nccl_us = time_graph(comm, nccl_graph, s, ev, o.warmup, o.repeats);
            double fused_us = 0;
            if (fused_runs) {
              const GraphExec fused_graph(
                  s, [&](cudaStream_t st) { peer.all_reduce_sum(data.data(), count, st); });
              fused_us = time_graph(comm, fused_graph, s, ev, o.warmup, o.repeats);
              peer.check();
            }
            std::lock_guard lock(mu);
            ours[static_cast<size_t>(r)].push_back(our_us);
            theirs[static_cast<size_t>(r)].push_back(nccl_us);
            fused[static_cast<size_t>(r)].push_back(fused_us);
          }
        },
        nopt);

    out << std::fixed << std::setprecision(1);
    out << "allreduce bench, tp " << tp << " on " << gpu_line(gpu) << " x " << tp << ", NCCL "
        << report.nccl_version << ", median of " << o.repeats << " graph launches\n";
    for (size_t k = 0; k < timed; ++k) {
      AllReduceBenchResult res;
      res.tp = tp;
      res.rows = cases[k].rows;
      res.hidden = cases[k].hidden;
      for (int r = 0; r < tp; ++r) {
        res.our_us = std::max(res.our_us, ours[static_cast<size_t>(r)][k]);
        res.nccl_us = std::max(res.nccl_us, theirs[static_cast<size_t>(r)][k]);
        res.fused_us = std::max(res.fused_us, fused[static_cast<size_t>(r)][k]);
      }
      res.nccl_bits_differ = nccl_differ[k];
      res.gpu = gpu;
      out << "  rows " << res.rows << " x hidden " << res.hidden << ": ours eager " << res.our_us
          << " us, fused ";
      if (res.fused_us > 0)
        out << res.fused_us << " us";
      else
        out << "not run";
      out << ", ncclAllReduce " << res.nccl_us << " us (its bits differ from the tree in "
          << res.nccl_bits_differ << " of " << cases[k].count() << " elements)\n";
      report.results.push_back(res);
    }
    if (!report.fused_why.empty())
      out << "  the fused all-reduce did not run: " << report.fused_why << "\n";
    out << std::defaultfloat;
    if (!report.ok()) return report;
  }
  return report;
}

nlohmann::json allreduce_bench_json(const AllReduceBenchResult& r, const AllReduceBenchOptions& o,
                                    const std::string& version) {
  nlohmann::json j{
      {"bench", "allreduce"},
      {"tp", r.tp},
      {"rows", r.rows},
      {"hidden", r.hidden},
      {"count", static_cast<int64_t>(r.rows) * r.hidden},
      {"our_us", r.our_us},
      {"fused_us", r.fused_us > 0 ? nlohmann::json(r.fused_us) : nlohmann::json(nullptr)},
      {"nccl_us", r.nccl_us},
      {"nccl_bits_differ", r.nccl_bits_differ},
      {"repeats", o.repeats},
      {"seed", o.seed},
      {"nccl_version", version},
  };
  add_gpu_json(j, r.gpu);
  return j;
}

}  // namespace sparkdraft::cuda

#endif  // SPARKDRAFT_HAVE_NCCL
