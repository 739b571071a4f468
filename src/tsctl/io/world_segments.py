"""The world size (processes under ``torchrun``, 1 without) of each segment of a run.

A run trains in segments: its start and each resume. The manifest keeps ``world_size`` (the newest
segment's) and ``segments`` (``started_step`` and ``world_size`` of every segment, oldest first).
Each rank draws its own samples, so a resume on another world size trains on other samples than
the uninterrupted run would have from the resume step on: it is allowed, with a one-line note.
"""

from __future__ import annotations

from typing import Any


def segments(manifest: dict[str, Any]) -> list[dict[str, int]]:
    """The segments a manifest records; one inferred from ``started_step`` and ``world_size`` where it has none."""
    if "segments" in manifest:
        return list(manifest["segments"])
    if "started_step" in manifest:
        return [{"started_step": int(manifest["started_step"]), "world_size": int(manifest.get("world_size", 1))}]
    return []


def with_segment(manifest: dict[str, Any], start: int, size: int) -> dict[str, Any]:
    """The manifest fields of a segment starting at step ``start`` on ``size`` processes."""
    return {"world_size": size, "segments": [*segments(manifest), {"started_step": start, "world_size": size}]}


def world_change(manifest: dict[str, Any], start: int, size: int) -> str | None:
    """A one-line note when a run resumed at ``start`` on ``size`` processes last ran on another number; else None."""
    before = segments(manifest)
    if not before or before[-1]["world_size"] == size:
        return None
    was = before[-1]["world_size"]
    return (
        f"this run last trained on {was} process(es) and resumes on {size}: each rank draws its own samples, so from step {start} on "
        f"they differ from an uninterrupted run's (resume with torchrun --nproc_per_node={was} to repeat them)"
    )
