#!/usr/bin/env python3
"""The draft step from Python on the GPU (docs/python.md, "Speed"):

1. host cost per propose call: the eager form (8 tensor arguments through DLPack, with
   stream=None and with an int stream), the bound form (no tensor arguments; replays the
   backend's graph), and a torch.cuda.graph replay of a captured propose;
2. the whole draft step from Python (the bound form, the backend's graph) against
   `sparkdraft bench step` on the same checkpoint, context and rows (its fused_us: the
   median graph launch with the L2 flushed before each, as here).

  PYTHONPATH=<pkg> python3 bench/python/bench_propose.py --cli build/sparkdraft \\
      [--preset qwen3-8b] [--ctx 4096] [--rows 1 8 32] [--repeats 50] [--json out.json]

Without --cli only the Python side runs. Prints a table; --json writes the results.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import sparkdraft


def per_call_us(fn, calls=20, batches=15):
    """Median over batches of the host time per call (calls queued back to back, then
    a synchronization outside the timing)."""
    out = []
    for _ in range(batches):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


def gpu_us(fn, repeats, flush):
    """Median GPU time of fn between two events, the L2 flushed before each."""
    times = []
    for _ in range(repeats):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def setup(ck, rows, ctx, seed):
    cfg = ck.config
    N, V, ps = cfg["block_size"], cfg["vocab_size"], 16
    ppr = (ctx + N + ps - 1) // ps + 1
    d = sparkdraft.Draft(ck, "cuda:0", max_reqs=rows, cache_slots=rows, page_size=ps,
                         max_pages_per_req=ppr, num_pages=rows * ppr, max_context_tokens=1024,
                         validate=False)
    W = len(cfg["target_layer_ids"]) * cfg["target_hidden_size"]
    g = torch.Generator(device="cuda").manual_seed(seed)
    tables = torch.arange(rows * ppr, dtype=torch.int32, device="cuda").reshape(rows, ppr)
    for r in range(rows):  # ctx positions of every row, 1024 tokens a call
        for s in range(0, ctx, 1024):
            n = min(1024, ctx - s)
            pos = torch.arange(s, s + n, dtype=torch.int64, device="cuda")
            slots = tables[r].long()[pos // ps] * ps + pos % ps
            hidden = torch.randn((n, W), generator=g, device="cuda").to(torch.bfloat16)
            d.store_context(hidden, pos, slots)
    bufs = dict(
        anchor_tokens=torch.randint(0, V, (rows,), generator=g, device="cuda"),
        anchor_positions=torch.full((rows,), ctx, dtype=torch.int64, device="cuda"),
        seeds=torch.randint(0, 2**40, (rows,), generator=g, device="cuda"),
        temperatures=torch.full((rows,), 1.0, dtype=torch.float32, device="cuda"),  # as bench step
        cache_slots=torch.arange(rows, dtype=torch.int64, device="cuda"),
        block_tables=tables,
        out_tokens=torch.empty((rows, N), dtype=torch.int64, device="cuda"),
        out_draft_logits=torch.empty((rows, N, V), dtype=torch.bfloat16, device="cuda"),
    )
    torch.cuda.synchronize()
    return d, bufs


def checkpoint_of(args):
    """The checkpoint to run: --checkpoint, else the preset's under --preset-dir (written once,
    seed 1, where `bench step` writes it too). Returns (path, loaded checkpoint)."""
    path = args.checkpoint or os.path.join(args.preset_dir, f"sparkdraft-bench-{args.preset}")
    if not os.path.exists(os.path.join(path, "config.json")):
        print(f"writing the {args.preset} checkpoint to {path}", flush=True)
        sparkdraft.make_checkpoint(path, args.preset, seed=1)
    return path, sparkdraft.Checkpoint(path)


def cli_step(cli, preset, ctx, rows, repeats, preset_dir):
    out = os.path.join(preset_dir, "bench_step.json")
    cmd = [cli, "bench", "step", "--preset", preset, "--ctx", str(ctx), "--repeats", str(repeats),
           "--preset-dir", preset_dir, "--json", out, "--rows", *map(str, rows)]
    print("running:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    with open(out) as f:
        return {r["rows"]: r for r in json.load(f)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", help="the sparkdraft tool (runs `bench step` for the comparison)")
    ap.add_argument("--preset", default="qwen3-8b")
    ap.add_argument("--checkpoint", help="a checkpoint instead of the preset (no CLI comparison)")
    ap.add_argument("--preset-dir", default=tempfile.gettempdir())
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--json")
    args = ap.parse_args()
    if not sparkdraft.cuda_available():
        sys.exit("bench_propose.py: needs the CUDA backend and a GPU")

    cli = {}
    if args.cli and not args.checkpoint:
        cli = cli_step(args.cli, args.preset, args.ctx, args.rows, args.repeats, args.preset_dir)
    path, ck = checkpoint_of(args)
    flush = torch.empty(2 * 64 * 2**20 // 4, dtype=torch.float32, device="cuda")  # > 2x L2

    results = []
    for rows in args.rows:
        d, b = setup(ck, rows, args.ctx, args.seed)
        stream = torch.cuda.current_stream().cuda_stream
        bound = d.bind(**b)
        bound.propose(rows, stream)  # runs directly and captures the backend's graph
        eager_none = per_call_us(lambda: d.propose(**b))
        eager_int = per_call_us(lambda: d.propose(**b, stream=stream))
        bound_us = per_call_us(lambda: bound.propose(rows, stream))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            d.propose(**b)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            d.propose(**b)
        replay_us = per_call_us(graph.replay)
        step_bound = gpu_us(lambda: bound.propose(rows, stream), args.repeats, flush)
        step_graph = gpu_us(graph.replay, args.repeats, flush)
        step_eager = gpu_us(lambda: d.propose(**b, stream=stream), args.repeats, flush)
        r = dict(preset=None if args.checkpoint else args.preset, checkpoint=path, ctx=args.ctx,
                 rows=rows, host_us_eager_stream_none=eager_none, host_us_eager_int_stream=eager_int,
                 host_us_bound=bound_us, host_us_torch_graph_replay=replay_us,
                 step_us_bound=step_bound, step_us_torch_graph=step_graph,
                 step_us_eager_launches=step_eager, plan=d.plan)
        if rows in cli:
            r["cli_fused_us"] = cli[rows]["fused_us"]
            r["bound_vs_cli"] = step_bound / r["cli_fused_us"]
        results.append(r)
        del bound, d, b, graph
        torch.cuda.empty_cache()

    print(f"\n{torch.cuda.get_device_name()}, {args.preset if not args.checkpoint else path}, ctx {args.ctx}")
    print("host us per call:  eager(None)  eager(int)  bound  graph-replay | "
          "step us: bound  torch-graph  eager-launches  cli-fused  bound/cli")
    for r in results:
        cli_us = r.get("cli_fused_us")
        print(f"rows {r['rows']:>3}:       {r['host_us_eager_stream_none']:9.1f} "
              f"{r['host_us_eager_int_stream']:11.1f} {r['host_us_bound']:6.1f} "
              f"{r['host_us_torch_graph_replay']:13.1f} | {r['step_us_bound']:11.1f} "
              f"{r['step_us_torch_graph']:12.1f} {r['step_us_eager_launches']:15.1f} "
              f"{cli_us if cli_us else float('nan'):10.1f} "
              f"{r.get('bound_vs_cli', float('nan')):10.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
        print("wrote", args.json)


if __name__ == "__main__":
    main()
