"""`t5forge cache-tasks` on Apache Beam: the local writer's cache, built by many workers.

The work is cut into index ranges of the cached steps' output. That output is a grain
MapDataset whose random steps seed example i from i alone, so a range computes the same
examples on whichever worker runs it. A counting pass then gives every example its position
j in the split, exactly as the local writer numbers them even when steps drop examples;
example j goes to shard j % n and each shard is written in order of j. Files, feature specs
and statistics are therefore those of `write_task_cache`, and training reads either cache
as the same examples in the same order. Cached steps that stream (an iterable source, a
regrouping step) depend on read order: such a split is one work unit, still the same cache,
with only the shard writing spread out. The last step of a split writes the info and
statistics files, then the completion marker.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import grain

from t5forge import errors
from t5forge.data.cache.store import (
    SplitStats,
    char_vocabularies,
    encode_example,
    feature_specs,
    finish_split,
    shard_paths,
    shard_writer,
    start_split,
    task_cache_dir,
)
from t5forge.data.grain_ops.regroup import READ_OPTIONS
from t5forge.errors import ConfigError, DataError, T5ForgeError

EXAMPLES_PER_WORK_UNIT = 2000


def _beam():
    try:
        import apache_beam
    except ImportError:
        raise ConfigError(
            "cache-tasks with --runner needs Apache Beam; install it with "
            "`pip install 't5forge[beam]'` (or drop --runner to use the local writer)"
        ) from None
    return apache_beam


@dataclasses.dataclass(frozen=True)
class SplitJob:
    """One task split to cache, with its shard count, the random steps' seed and whether the
    stats count characters (write_task_cache's `seed` and `char_counts`)."""

    task: object
    split: str
    shard_count: int
    seed: int = 0
    char_counts: bool = False

    @property
    def label(self) -> str:
        return f"{self.task.name}:{self.split}"

    def new_stats(self) -> SplitStats:
        return SplitStats(char_vocabularies(self.task) if self.char_counts else None)


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """Examples [start, stop) of the cached steps' output; stop None reads the split in order."""

    index: int
    start: int
    stop: int | None


def plan_work_units(task, split: str, examples_per_unit: int = EXAMPLES_PER_WORK_UNIT):
    """Index ranges when the cached steps keep random access, else the whole split as one."""
    dataset = task.cached_steps_dataset(split)
    if not isinstance(dataset, grain.MapDataset):
        return [WorkUnit(0, 0, None)]
    size = len(dataset)
    return [
        WorkUnit(index, start, min(start + examples_per_unit, size))
        for index, start in enumerate(range(0, size, examples_per_unit))
    ]


@dataclasses.dataclass
class UnitSummary:
    """What the counting pass learns from one work unit."""

    unit: int
    examples: int
    specs: dict | None
    stats: SplitStats


@dataclasses.dataclass
class SplitLayout:
    """Where each work unit's examples start in the split, and the split's specs and stats."""

    offsets: dict[int, int]
    specs: dict | None
    stats: SplitStats


def layout_split(label: str, summaries: Iterable[UnitSummary]) -> SplitLayout:
    """Offsets by unit order; specs from the split's first example, as the local writer."""
    offsets, position, specs, stats = {}, 0, None, SplitStats()
    for summary in sorted(summaries, key=lambda s: s.unit):
        offsets[summary.unit] = position
        position += summary.examples
        stats.merge(summary.stats)
        if summary.specs is None:
            continue
        if specs is None:
            specs = summary.specs
        elif summary.specs != specs:
            raise DataError(
                f"{label}: cached examples change feature types within the split "
                f"({specs} then {summary.specs}); make the task's cached features consistent"
            )
    return SplitLayout(offsets, specs, stats)


def _make_dofns(beam):
    """The DoFns, defined once Beam is imported (it is an optional extra)."""

    class EncodeWorkUnit(beam.DoFn):
        """Runs the cached steps over one unit: records by (unit, index), then a summary."""

        SUMMARY = "summary"

        def __init__(self, job: SplitJob):
            self._job = job
            self._dataset = None

        def _examples(self, unit: WorkUnit):
            job = self._job
            if unit.stop is None:
                return job.task.get_uncached_examples(job.split, seed=job.seed)
            if self._dataset is None:
                self._dataset = job.task.cached_steps_dataset(job.split, seed=job.seed)
            return self._dataset[unit.start : unit.stop].to_iter_dataset(READ_OPTIONS)

        def process(self, unit: WorkUnit):
            specs, stats, count = None, self._job.new_stats(), 0
            for count, example in enumerate(self._examples(unit), start=1):
                if specs is None:
                    specs = feature_specs(example)
                yield (unit.index, count - 1, encode_example(example, specs))
                stats.add(example, specs)
            summary = UnitSummary(unit.index, count, specs, stats)
            yield beam.pvalue.TaggedOutput(self.SUMMARY, summary)

    class WriteShard(beam.DoFn):
        """Writes one shard's records in split order; yields the shard index."""

        def __init__(self, job: SplitJob, task_dir: Path):
            self._job, self._task_dir = job, task_dir

        def process(self, keyed):
            shard, records = keyed
            path = shard_paths(self._task_dir, self._job.split, self._job.shard_count)[shard]
            writer = shard_writer(path)
            try:
                for _, record in sorted(records, key=lambda r: r[0]):
                    writer.write(record)
            finally:
                writer.close()
            yield shard

    return EncodeWorkUnit, WriteShard


def _place(record, layout: SplitLayout, shard_count: int):
    unit, index, data = record
    position = layout.offsets[unit] + index
    return position % shard_count, (position, data)


def _finish(written: Sequence[int], layout: SplitLayout, job: SplitJob, task_dir: Path):
    """Empty files for shards no example reached, then info, stats and the marker."""
    paths = shard_paths(task_dir, job.split, job.shard_count)
    for shard in sorted(set(range(job.shard_count)) - set(written)):
        shard_writer(paths[shard]).close()
    finish_split(task_dir, job.split, layout.specs, job.shard_count, layout.stats)
    return job.label


def _add_split(pipeline, beam, job: SplitJob, output_dir, examples_per_unit: int) -> None:
    encode_work_unit, write_shard = _make_dofns(beam)
    task_dir = task_cache_dir(output_dir, job.task.name)
    units = plan_work_units(job.task, job.split, examples_per_unit)
    label = job.label
    encoded = (
        pipeline
        | f"{label}/units" >> beam.Create(units)
        | f"{label}/spread" >> beam.Reshuffle()
        | f"{label}/encode"
        >> beam.ParDo(encode_work_unit(job)).with_outputs(encode_work_unit.SUMMARY, main="records")
    )
    layout = (
        encoded[encode_work_unit.SUMMARY]
        | f"{label}/count" >> beam.combiners.ToList()
        | f"{label}/layout" >> beam.Map(lambda summaries: layout_split(label, summaries))
    )
    written = (
        encoded.records
        | f"{label}/place"
        >> beam.Map(_place, layout=beam.pvalue.AsSingleton(layout), shard_count=job.shard_count)
        | f"{label}/group" >> beam.GroupByKey()
        | f"{label}/write" >> beam.ParDo(write_shard(job, task_dir))
        | f"{label}/written" >> beam.combiners.ToList()
    )
    _ = written | f"{label}/finish" >> beam.Map(
        _finish, layout=beam.pvalue.AsSingleton(layout), job=job, task_dir=task_dir
    )


def run_beam_cache(
    jobs: Sequence[SplitJob],
    output_dir,
    pipeline_args: Sequence[str],
    examples_per_unit: int = EXAMPLES_PER_WORK_UNIT,
) -> None:
    """Caches every job's split in one Beam pipeline run with `pipeline_args` (Beam's own
    options: --runner, --direct_num_workers, --project...). Unfinished splits are marked so
    before the pipeline starts, so a failed run leaves nothing that reads as complete."""
    beam = _beam()
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(list(pipeline_args))
    for job in jobs:
        start_split(task_cache_dir(output_dir, job.task.name), job.split)
    pipeline = beam.Pipeline(options=options)
    for job in jobs:
        _add_split(pipeline, beam, job, output_dir, examples_per_unit)
    try:
        pipeline.run().wait_until_finish()
    except Exception as error:
        raise _worker_error(error) or error from None


_WORKER_ERROR = re.compile(r"t5forge\.errors\.(\w+): (.*?)(?: \[while running '[^']*'\])?$", re.M)


def _worker_error(error: Exception) -> T5ForgeError | None:
    """The t5forge error a worker raised, as one line: runners hand it back wrapped (the
    same type with the step name appended, or a RuntimeError holding the traceback text)."""
    found = _WORKER_ERROR.findall(str(error))
    if not found:
        return None
    name, message = found[-1]
    kind = getattr(errors, name, None)
    return (kind if isinstance(kind, type) and issubclass(kind, T5ForgeError) else DataError)(
        message
    )
