#!/usr/bin/env python3
"""Speculative decoding end to end: a transformers target (Qwen3ForCausalLM from a small
config with seeded random weights; nothing is downloaded) and a synthetic sparkdraft
draft shaped for it. The draft proposes, the target scores each block in one forward,
the lossless verifier accepts, the accepted tokens become context.

  python examples/python/spec_decode.py [--device cpu|cuda] [--rows 4] [--new-tokens 64]
                                        [--temperature 0] [--method standard|block]

Prints the tokens, tokens per second, the mean accepted length, the acceptance at each
draft position and the draft's share of the time. (The draft's weights are random, so
it agrees with the target only by chance: the point is the loop, not the speed-up.)
"""

import argparse
import math
import tempfile

import torch

import sparkdraft
from sparkdraft.spec import SpecDecoder, make_draft_checkpoint_for, make_target


def at_least(lo: int):
    """An argparse type: an int >= lo (a bad value is a usage error, exit status 2)."""
    def parse(text: str) -> int:
        v = int(text)
        if v < lo:
            raise argparse.ArgumentTypeError(f"{v} is below {lo}")
        return v
    parse.__name__ = f"int >= {lo}"
    return parse


def temperature(text: str) -> float:
    v = float(text)
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a finite number >= 0")
    return v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if sparkdraft.cuda_available() else "cpu")
    ap.add_argument("--rows", type=at_least(1), default=4, help="prompts decoded together")
    ap.add_argument("--new-tokens", type=at_least(1), default=64)
    ap.add_argument("--temperature", type=temperature, default=0.0)
    ap.add_argument("--method", default="standard", choices=["standard", "block"])
    ap.add_argument("--vocab", type=at_least(2), default=32,
                    help="a small vocabulary lets the random draft agree with the target now and then")
    ap.add_argument("--block-size", type=at_least(1), default=4)
    ap.add_argument("--seed", type=at_least(0), default=0)
    ap.add_argument("--check-greedy", action="store_true",
                    help="at temperature 0, compare with the target's own generate()")
    args = ap.parse_args()

    target = make_target(vocab_size=args.vocab, seed=args.seed, device=args.device)
    with tempfile.TemporaryDirectory() as tmp:
        ck = make_draft_checkpoint_for(target, tmp, block_size=args.block_size, seed=args.seed + 1)
        print(ck)
        pages = (16 + args.new_tokens + args.block_size + 16) // 16 + 1
        draft = sparkdraft.Draft(ck, args.device, max_reqs=args.rows, cache_slots=args.rows,
                                 page_size=16, max_pages_per_req=pages, num_pages=args.rows * pages)
        spec = SpecDecoder(target, draft, method=args.method)
        g = torch.Generator().manual_seed(args.seed)
        prompts = [torch.randint(0, args.vocab, (int(n),), generator=g).tolist()
                   for n in torch.randint(4, 16, (args.rows,), generator=g)]
        out = spec.generate(prompts, args.new_tokens, temperature=args.temperature,
                            seeds=[args.seed * 1000 + r for r in range(args.rows)],
                            progress=args.new_tokens * args.rows >= 256)
        for i, (p, o) in enumerate(zip(prompts, out)):
            print(f"row {i}: prompt {p}\n       tokens {o}")
        print(spec.stats.summary())
        if args.check_greedy and args.temperature == 0:
            for i, p in enumerate(prompts):
                x = torch.tensor([p], device=args.device)
                ref = target.generate(x, attention_mask=torch.ones_like(x),
                                      max_new_tokens=args.new_tokens, do_sample=False)
                same = ref[0, len(p):].tolist() == out[i]
                print(f"row {i}: {'equals' if same else 'DIFFERS FROM'} the target's greedy generate()")


if __name__ == "__main__":
    main()
