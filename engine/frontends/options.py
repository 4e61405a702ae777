"""Command-line options shared by `generate` and `bench`."""
from __future__ import annotations

import argparse

from engine.drafting.draft_choice import DraftLength, DraftSpec
from engine.errors import EngineError


def draft_max_arg(text: str) -> DraftLength:
    try:
        length = DraftLength.parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number of tokens or 'auto'") from None
    if not length.is_auto and length.k > 64:
        raise argparse.ArgumentTypeError("must be between 0 and 64")
    return length


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", required=True, help="target model (GGUF file)")
    p.add_argument("--draft", type=DraftSpec.parse, default=DraftSpec.NONE,
                   help="drafter: a GGUF file (a small model of the target's family, or a Gemma 4 assistant, which rides "
                        "its Gemma 4 target), 'lookup' (prompt lookup), 'lookup+FILE' (lookup first, then the model) or "
                        "'none'")
    p.add_argument("--ctx", type=int, default=4096, help="context length in tokens (default 4096)")
    add_thread_options(p)
    p.add_argument("--gpu-layers", type=int, default=-1, help="layers to offload to the GPU (-1 = all, 0 = none)")


def add_sampling_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--draft-max", type=draft_max_arg, default=DraftLength.AUTO,
                   help="draft length k, or 'auto' (default)")
    p.add_argument("--p-min", type=float, default=0.0, help="stop drafting below this drafter confidence")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--max-tokens", type=int, default=256)


def add_history_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--history-cap-mb", type=float, default=None,
                   help="memory cap of the history index in MB (default 64); over it, the least used n-grams go")


def history_cap_bytes(args) -> int:
    from engine.drafting.history_index import DEFAULT_CAP_MB

    mb = DEFAULT_CAP_MB if args.history_cap_mb is None else args.history_cap_mb
    if not mb > 0:
        raise EngineError("--history-cap-mb must be above 0")
    return int(mb * 2**20)


def add_thread_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for generating (default: physical cores, as llama.cpp; affinity and cgroup quota respected)")
    p.add_argument("--threads-batch", type=int, default=None,
                   help="CPU threads for prompts and verification blocks (default: every CPU the process may use)")
    p.add_argument("--draft-threads", type=int, default=None, help="CPU threads for the drafter model (default: as --threads)")
    p.add_argument("--cpu-drafter", choices=["auto", "on", "off"], default="auto",
                   help="draft with a copy of the drafter made for this CPU, all matrices in Q4_0 (made once; "
                        "replies are the same): auto = on x86 CPUs with AVX2 when nothing is offloaded to a GPU")
    p.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto",
                   help="llama.cpp's flash attention for both models: auto = llama.cpp's choice for the target and, "
                        "on a CPU, off for the drafter (its CPU kernel makes deep drafting dearer)")


def load_settings(args):
    from engine.llama.types import LoadSettings

    choice = {"auto": None, "on": True, "off": False}
    return LoadSettings(n_ctx=args.ctx, n_gpu_layers=args.gpu_layers, n_threads=args.threads,
                        n_threads_batch=getattr(args, "threads_batch", None),
                        cpu_drafter=choice[getattr(args, "cpu_drafter", "auto")],
                        flash_attn=choice[getattr(args, "flash_attn", "auto")])


def draft_load_settings(args):
    """The drafter's load settings: the target's, with its own thread count if one was given."""
    from dataclasses import replace

    base = load_settings(args)
    n = getattr(args, "draft_threads", None)
    return replace(base, n_threads=n) if n else None


def generation_settings(args):
    from engine.sampling import SamplingParams
    from engine.decoding.session import GenerationSettings

    sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.min_p, args.seed)
    sampling.validate()
    if args.max_tokens < 1:
        raise EngineError("--max-tokens must be at least 1")
    return GenerationSettings(sampling=sampling, draft_max=args.draft_max, max_tokens=args.max_tokens, p_min=args.p_min)
