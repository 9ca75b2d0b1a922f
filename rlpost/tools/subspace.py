"""``rlpost subspace --from CKPT_A --to CKPT_B --rank 8 --out subspace.pt``: the reference subspaces of the
update between two checkpoints (rlpost/grad/subspace.py), for ``algorithm/grad=trusted_projection``
with ``source=file``. Plain flags, no config to compose: a bad path or flag exits with code 2 and one
line, through the launch path's ``fail`` (rlpost/app.py)."""

from __future__ import annotations

import argparse

from rlpost.app import fail
from rlpost.grad.subspace import SubspaceSettings, build_subspace, parameter_deltas, save_subspace


def main(argv: list[str]) -> int:
    """``rlpost subspace --from CKPT_A --to CKPT_B --rank 8 --out subspace.pt``."""
    p = argparse.ArgumentParser(prog="rlpost subspace", description="Reference subspaces from two checkpoints.")
    p.add_argument("--from", dest="start", required=True, help="checkpoint folder (or .safetensors) at the start")
    p.add_argument("--to", dest="end", required=True, help="checkpoint folder (or .safetensors) at the end")
    p.add_argument("--rank", type=int, default=8, help="top-k singular directions per matrix (default 8)")
    p.add_argument("--energy", type=float, default=None, help="keep the k reaching this energy fraction")
    p.add_argument("--include", default=None, help="regex of parameter names to keep (default: all)")
    p.add_argument("--exclude", default=None, help="regex of parameter names to skip (default: none)")
    p.add_argument("--svd", default="auto", choices=["auto", "full", "lowrank"], help="SVD method")
    p.add_argument("--out", required=True, help="output file (torch.save)")
    args = p.parse_args(argv)
    try:
        settings = SubspaceSettings(
            rank=args.rank, energy=args.energy, include=args.include, exclude=args.exclude, svd=args.svd
        )
        deltas = parameter_deltas(args.start, args.end)
        subspace = build_subspace(deltas, args.rank, args.energy, settings)
    except (OSError, ValueError) as err:
        return fail(str(err))
    if not subspace:
        return fail("no 2-D weight matched --include/--exclude")
    save_subspace(subspace, args.out, start=str(args.start), end=str(args.end), rank=args.rank)
    ranks = [b["S"].numel() for b in subspace.values()]
    kept = [float(b["S"].pow(2).sum() / b["energy"]) for b in subspace.values() if b["energy"] > 0]
    moved = sum(b["energy"] > 0 for b in subspace.values())
    print(f"{len(subspace)} matrices ({moved} moved), rank mean {sum(ranks) / len(ranks):.2f} max {max(ranks)}")
    if kept:
        print(f"energy captured: mean {sum(kept) / len(kept):.3f} min {min(kept):.3f}")
    print(f"wrote {args.out}")
    return 0
