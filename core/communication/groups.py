"""`ParallelGroups`: the frozen collection of this rank's communication groups for a
data x model x pipeline layout. Layers and schedules receive it explicitly (no globals).

World rank = (stage * dp + d) * mp + m: the model-parallel ranks of one layer are neighbours
(they talk the most), data-parallel replicas are next, pipeline stages are outermost.
"""
from dataclasses import dataclass

from ..errors import ParallelConfigError
from .management import Group, get_group, split_groups, world_comm


@dataclass(frozen=True)
class ParallelGroups:
    """This rank's groups: `data` (same stage and model slice), `model` (same stage and replica),
    `pipeline` (same replica and model slice, one rank per stage), `stage` (all ranks of this
    stage) and `world`."""
    world: Group
    data: Group
    model: Group
    pipeline: Group
    stage_group: Group
    data_parallel: int
    model_parallel: int
    pipeline_stages: int

    @classmethod
    def build(cls, data_parallel=None, model_parallel=1, pipeline_stages=1):
        """Split the world (collective over all ranks). `data_parallel=None` takes what is left."""
        world = get_group(None)
        n = world.size
        mp, pp = int(model_parallel), int(pipeline_stages)
        if data_parallel is None:
            if n % (mp * pp):
                raise ParallelConfigError(
                    f"model_parallel={mp} x pipeline_stages={pp} = {mp * pp} does not divide the "
                    f"{n} ranks, so no data_parallel degree fits")
            data_parallel = n // (mp * pp)
        dp = int(data_parallel)
        if dp * mp * pp != n:
            raise ParallelConfigError(
                f"data_parallel={dp} x model_parallel={mp} x pipeline_stages={pp} = {dp * mp * pp} "
                f"must equal the number of ranks ({n})")
        world_comm()
        key = (dp, mp, pp)

        def coords(r):
            return r // (dp * mp), (r // mp) % dp, r % mp

        data = split_groups(key + ("data",), lambda r: _colour("dp", coords(r)[0], coords(r)[2]))
        model = split_groups(key + ("model",), lambda r: _colour("mp", coords(r)[0], coords(r)[1]))
        pipe = split_groups(key + ("pipe",), lambda r: _colour("pp", coords(r)[1], coords(r)[2]))
        stage = split_groups(key + ("stage",), lambda r: _colour("stage", coords(r)[0]))
        return cls(world, data, model, pipe, stage, dp, mp, pp)

    @property
    def rank(self):
        return self.world.rank

    @property
    def stage(self):
        """This rank's pipeline stage."""
        return self.rank // (self.data_parallel * self.model_parallel)

    @property
    def dp_rank(self):
        return self.data.rank

    @property
    def mp_rank(self):
        return self.model.rank

    def coords(self, world_rank=None):
        """(stage, data-parallel index, model-parallel index) of a world rank (default: this one)."""
        r = self.rank if world_rank is None else world_rank
        dp, mp = self.data_parallel, self.model_parallel
        return r // (dp * mp), (r // mp) % dp, r % mp

    def world_rank(self, stage, dp_index, mp_index):
        return (stage * self.data_parallel + dp_index) * self.model_parallel + mp_index

    def describe(self):
        return {"data_parallel": self.data_parallel, "model_parallel": self.model_parallel,
                "pipeline_stages": self.pipeline_stages, "rank": self.rank}


def _colour(kind, *index):
    colour = 0
    for i in index:
        colour = colour * 4096 + i
    return colour, f"{kind}{'-'.join(str(i) for i in index)}"
