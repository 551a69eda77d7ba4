"""`python forget.py --model DIR`: the per-head window analysis of a Hugging Face style checkpoint.

Loading and tokenising are hf_models.py's, reading the gates hf_capture.py's (and adapters.py's); the per-head analysis,
the table and the JSON are heads/table.py's, the same as for the shipped model. This module joins the two:

    analyse_hf_model(cfg)      ModelRunConfig -> (results [HeadResult], info)
    main_hf_model(args)        forget.py's --model path: one line on stderr and exit code 2 on a problem
"""
import math
import os
import time

import torch

from foxwindow import outputs
from foxwindow.heads import driver, table, verdict
from foxwindow.laws import gates
from foxwindow.models import adapters, hf_capture
from foxwindow.models import hf_load as hf_models
from foxwindow.models.traces import query_rows, save_trace
from foxwindow.report import command as report_command
from foxwindow.training import distributed

__all__ = ["analyse_hf_model", "main_hf_model"]


def note_inputs(cfg):
    """Every file the model run reads, recorded as an input (outputs.note_input) before its outputs are checked: the
    files of the --model and --tokenizer folders (a hub name has none here) and the --text file, so that no
    output, not even with --force, replaces one of them."""
    for what, path in (("a file of --model", cfg.model), ("a file of --tokenizer", cfg.tokenizer)):
        if path and os.path.isdir(path):
            for root, _, files in os.walk(path):
                for f in files:
                    outputs.note_input(os.path.join(root, f), what)
    if cfg.text and os.path.isfile(cfg.text):
        outputs.note_input(cfg.text, "--text")


def _need_device(cfg):
    if str(cfg.device).startswith("cuda") and not torch.cuda.is_available():
        raise hf_models.ModelError(f"--device {cfg.device}: no CUDA device here")


def analyse_hf_model(cfg, *, eps=None, L=None, progress=True, save_traces=None, n_boot=driver.N_BOOT, seed=None,
                     workers=1, max_minutes=None, trace_gib=driver.TRACE_GIB):
    """Per-head analysis of a Hugging Face style checkpoint (see hf_models' module docstring).
    eps= or L=: thresholds of the verdict and predictions (at most one; neither: the eps scan's); n_boot, seed: as
    heads.analyse_layers. Returns (results [HeadResult], info dict) as heads.analyse_model does, info adding the
    families, what the laws mean for each, each family's kind (softmax: attends over a KV cache; recurrent /
    constant: a gated state, no KV cache) and whether attention-mass windows exist. save_traces: .npz path for
    the analysed traces (written atomically; check it with outputs.check_writable first); its metadata holds
    the families and kinds, so that predictions made from the traces later know what they apply to; its room
    on the disk is checked before the capture (outputs.need_space).
    workers, max_minutes: driver.analyse_layers (a stopped run returns its finished heads, info["partial"]).
    trace_gib: the memory (GiB) the traces of a group of layers may take: the layers are captured and analysed
    group by group (driver.analyse_stream), each group one forward pass up to its last layer, with the results of
    one pass; None, or save_traces: every layer in one pass. A first forward pass over one sequence finds the
    layers and their heads before any long work.
    Under torchrun each rank captures a block of the sequences and analyses a block of the heads; rank 0
    gathers and returns them (the other ranks (None, None))."""
    Ls = gates.levels(eps, L, default=driver.EPS_SCAN, distinct=True)
    mass_L = gates.threshold(cfg.mass_eps)
    t0 = time.perf_counter()
    _need_device(cfg)
    env = distributed.setup(cfg.device)         # under torchrun: the process group, and this rank's device
    device = str(env.device) if distributed.launched() else cfg.device

    def load():                                 # each rank its own machine's files; one outcome for all ranks
        hf_models.load_adapters(cfg.adapters)
        model, config = hf_models.load_pretrained(cfg.model, device, cfg.dtype)
        tok = hf_models.load_tokenizer(cfg.tokenizer or cfg.model)
        return model, config, hf_models.heldout_ids(tok, cfg.n_seq, cfg.seq_len, cfg.text,
                                                    getattr(config, "vocab_size", None))
    model, config, (ids, spans) = distributed.together(load)
    driver.same_model_on_every_rank(model, ids, f"--model {cfg.model}")
    rows = query_rows(cfg.seq_len)
    S, T = ids.shape
    # the layers, their families and heads, from one sequence (in call order; a layer called twice is a second name)
    probe, fam, lay, _ = distributed.together(lambda: hf_capture.capture_batches(model, ids[:1], 1, device,
                                                                                 per_channel=cfg.per_channel))
    shapes = {n: (S, T, t.shape[2]) for n, t in hf_capture.analysis_traces(probe, cfg.per_channel).items()}
    del probe
    if save_traces and distributed.is_main():     # float32 (S, T, H) a layer: refused before the capture
        outputs.need_space(save_traces, 4 * sum(math.prod(sh) for sh in shapes.values()), "--save-traces")
    layer_names = [n for n, _, _ in adapters.find_layers(model)]
    # a layer group's forward pass may stop after its last layer when the layers run in module order, once each
    in_order = list(shapes) == [n for n in layer_names if n in shapes] and len(shapes) == len(layer_names)
    budget = None if save_traces or trace_gib is None or not in_order else trace_gib * 2 ** 30
    groups = driver.plan_groups(shapes, budget)
    a, b = distributed.shard_range(S) if distributed.launched() else (0, S)
    families = sorted(set(fam.values()))
    kinds = {f: adapters.get_adapter(f).kind for f in families}
    mass, t_capture = {}, [0.0]                 # mass: {name: (S, R, H) attention-mass windows} on rank 0

    def capture_group(names, flag):
        t = time.perf_counter()
        one = len(groups) == 1
        # each rank's forward passes, then rank 0's writes: an error on one rank (memory on one machine) stops every
        # rank with its message (distributed.together) instead of leaving them waiting in the gather
        decays, _, _, mg = distributed.together(lambda: hf_capture.capture_batches(
            model, ids[a:b], cfg.batch, device, cfg.mass_eps, rows, cfg.per_channel,
            progress=progress and distributed.is_main(), names=None if one else names,
            upto=names[-1] if in_order else None, stop=flag), "failed in the capture")          # (upto: no LM head)
        if distributed.any_true(flag):
            return None
        traces = hf_capture.analysis_traces(decays, cfg.per_channel)            # {name: (S, T, H or H*K)}
        del decays
        if distributed.launched():          # every rank's sequences in rank order, as one process captures them
            traces = distributed.gather_traces(traces, to_all=True)
            mg = distributed.gather_traces(mg) if mg else mg

        def keep():
            if save_traces and distributed.is_main():
                save_trace(save_traces, traces, dict(model=cfg.model, families=fam,
                                                     kinds={n: kinds[f] for n, f in fam.items()}, family_kinds=kinds,
                                                     kv_cache=all(k == "softmax" for k in kinds.values()),
                                                     spans=spans, L=list(Ls), per_channel=cfg.per_channel),
                           force=True)                      # save_traces: checked (and --force) before the work
            if distributed.is_main():
                mass.update(mg)
        distributed.together(keep, "failed in the capture")
        t_capture[0] += time.perf_counter() - t
        return traces

    # the same verdict and predictions as for the shipped model, with each layer's own index
    results, seed, partial = driver.analyse_or_partial(shapes, Ls, n_boot, seed, progress, None, workers, mass_L,
                                                       rows.numpy(), max_minutes, pmf_L=gates.threshold(1e-3),
                                                       capture=capture_group, groups=groups)
    if not distributed.is_main():
        return None, None
    for r in results:                           # a stopped run: the heads finished
        n = r.layer_name
        if lay[n] is not None:
            r.layer = lay[n]
        if n in mass:
            r.mass_window_mean = float(mass[n][:, :, r.head].double().mean())
    no_mass = [f for f in families if kinds[f] != "softmax"]
    info = dict(checkpoint=cfg.model, model=cfg.model, n_seq=cfg.n_seq, seq_len=cfg.seq_len, spans=spans,
                n_boot=n_boot, seed=seed, alpha=verdict.ALPHA, alpha_test=verdict.ALPHA / (2 * max(1, len(results))),
                capture_s=t_capture[0], total_s=time.perf_counter() - t0, val_bpc=None,
                rows="second half of each sequence", layers=list(shapes), families=families,
                laws={f: adapters.get_adapter(f).note for f in families}, kinds=kinds,
                per_channel=cfg.per_channel, tokens="tokenizer ids of " + (cfg.text or "the held-out plays"),
                mass_window=("attention-mass window from the attention op's q, k" if not no_mass else
                             f"not available for {', '.join(no_mass)}: no attention matrix (a recurrent state); "
                             f"W_mass is empty"))
    info.update(driver.layer_traits(list(shapes), {n: fam.get(n) for n in shapes}))
    if partial:
        info["partial"] = partial
    return results, info


def main_hf_model(args):
    """`python forget.py --model ...` (args parsed by heads.command.main). Returns the exit code: 0, or 2 after one
    line on stderr for a problem with the model, tokenizer, text, adapter or options."""
    force = bool(getattr(args, "force", False))
    try:
        cfg = hf_models.ModelRunConfig(model=args.model, tokenizer=args.tokenizer, text=args.text,
                                       device=args.device, dtype=args.dtype, n_seq=args.n_seq, seq_len=args.seq_len,
                                       batch=args.batch, mass_eps=args.eps, per_channel=args.per_channel,
                                       adapters=tuple(getattr(args, "adapter", None) or ()))
        json_path, traces_path = getattr(args, "json", None), getattr(args, "save_traces", None)
        if distributed.launched():
            # every rank joins the process group before any check (analyse_hf_model's checks are shared)
            _need_device(cfg)
            distributed.setup(cfg.device)

        def outputs_ok():                   # rank 0 alone writes: the outputs are its machine's to check
            if not distributed.is_main():
                return
            note_inputs(cfg)
            for p, what in ((json_path, "--json"), (traces_path, "--save-traces")):
                if p:
                    outputs.check_writable(p, force=force, what=what)             # before any work
            if getattr(args, "report", None):
                args.report = report_command.check_out_arg(args)
        distributed.together(outputs_ok)
        eps = sorted(set(driver.EPS_SCAN) | {args.eps}, reverse=True)          # eps -> L, once
        results, info = analyse_hf_model(cfg, L=[gates.threshold(e) for e in eps],
                                         progress=not getattr(args, "no_progress", False), save_traces=traces_path,
                                         n_boot=args.n_boot, seed=args.seed, workers=getattr(args, "workers", 1),
                                         max_minutes=getattr(args, "max_minutes", None),
                                         trace_gib=getattr(args, "trace_gib", None) or driver.TRACE_GIB)
        if results is None:
            return 0                                  # not rank 0: rank 0 prints and writes
        driver.stop_unless_finished(info)             # stopped before any head: no empty table or JSON
        table.print_table(results, info, eps=args.eps)
        for f in info["families"]:
            state = "attends over a KV cache" if info["kinds"][f] == "softmax" else "a gated state, no KV cache"
            print(f"{f} ({state}): {info['laws'][f]}")
        print(f"W_mass: {info['mass_window']}")
        if json_path:
            outputs.write_result(json_path, table.to_json(results, info), "heads")
        if getattr(args, "report", None):
            report_command.after_analysis(table.to_json(results, info), args)
        if info.get("partial"):
            return table.say_partial(info, json_path)
    except (hf_models.ModelError, ValueError) as exc:
        if getattr(args, "debug", False):
            raise
        msg = str(exc)
        if getattr(args, "model_flag", "--model") == "--checkpoint":      # a folder given as --checkpoint
            msg = msg.replace(f"--model {args.model}", f"--checkpoint {args.model} (a folder, read as a Hugging Face "
                                                       "style checkpoint)")
        raise outputs.UsageError(msg) from None     # one line, exit 2, as every command's (outputs.cli)
    return 0
