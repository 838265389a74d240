"""GPT over pipeline stages: embedding on the first stage, blocks split evenly in order, final norm
and the tied output projection on the last, run by core's 1F1B `PipelineCell`.

The output projection is tied to the input embedding, which lives on another stage: the last stage
holds a copy of the table (the same initial values), and after every backward the two copies'
gradients are summed over the group {first stage, last stage} of this data/model slice, as
Megatron does, so both copies take the same optimizer step and stay equal.
"""
import numpy as np

from mstrain import Parameter, Tensor, nn
from mstrain.communication import copy_to_region, create_group
from mstrain.communication.transport import all_reduce_array
from mstrain.ops import functional as F
from mstrain.parallel import PipelineCell, PipelineTrainOneStepCell

from .layers import model_parallel_degree

__all__ = ["gpt_pipeline_stages", "TiedPipelineTrainOneStepCell", "build_pipeline"]


class _EmbeddingStage(nn.Cell):
    def __init__(self, gpt):
        super().__init__()
        self.embedding, self.position_embedding = gpt.embedding, gpt.position_embedding

    def construct(self, input_ids):
        positions = Tensor(np.arange(input_ids.shape[1], dtype=np.int32))
        return F.add(self.embedding(input_ids), self.position_embedding(positions))


class _HeadStage(nn.Cell):
    """Final norm and logits against the embedding table: the table itself when the embedding runs
    on the same stage, else this stage's copy of it."""

    def __init__(self, gpt, copy_table):
        super().__init__()
        self.final_norm, self.groups, self.mask = gpt.final_norm, gpt.groups, gpt.padding_mask
        table = gpt.embedding.embedding_table
        self.output_table = Parameter(Tensor(table.asnumpy().copy()), name="output_embedding_table") \
            if copy_table else table

    def construct(self, x):
        hidden = self.final_norm(x)
        if model_parallel_degree(self.groups) > 1:
            hidden = copy_to_region(hidden, self.groups.model)
        b, t, h = hidden.shape
        logits = F.reshape(F.matmul(F.reshape(hidden, (b * t, h)), F.transpose(self.output_table)), (b, t, -1))
        return logits if self.mask is None else F.add(logits, Tensor(self.mask))


class _Block(nn.Cell):
    def __init__(self, block):
        super().__init__(auto_prefix=False)
        self.block = block

    def construct(self, x):
        return self.block(x)


def gpt_pipeline_stages(gpt, stages):
    """The GPT's cells in order with `pipeline_stage` set: blocks split into equal consecutive runs."""
    per_stage = len(gpt.blocks) // stages
    cells = [_EmbeddingStage(gpt)]
    cells[0].pipeline_stage = 0
    for i, block in enumerate(gpt.blocks):
        cells.append(block)
        block.pipeline_stage = i // per_stage
    head = _HeadStage(gpt, copy_table=stages > 1)
    head.pipeline_stage = stages - 1
    return cells + [head]


class TiedPipelineTrainOneStepCell(PipelineTrainOneStepCell):
    """A pipeline step whose tied embedding copies (first and last stage) get their summed gradient."""

    def __init__(self, pipeline, optimizer, tied, tie_group):
        super().__init__(pipeline, optimizer)
        self.tied, self.tie_group = tied, tie_group

    def construct(self, inputs, labels):
        loss, grads = self.pipeline.forward_backward(inputs, labels)
        by_id = {id(p): g for p, g in zip(self.pipeline.trainable_params(), grads)}
        if self.tied is not None:
            summed = all_reduce_array(by_id[id(self.tied)].asnumpy(), self.tie_group, "sum")
            by_id[id(self.tied)] = Tensor(summed)
        grads = self.reducer(tuple(by_id[id(p)] for p in self.optimizer.parameters))
        self.optimizer(grads)
        return loss


def build_pipeline(gpt, loss_fn, groups, micro_batch_num):
    """(PipelineCell, the tied Parameter held on this rank or None, the tie group or None)."""
    cells = gpt_pipeline_stages(gpt, groups.pipeline_stages)
    pipeline = PipelineCell(cells, loss_fn, micro_batch_num=micro_batch_num, groups=groups)
    last = groups.pipeline_stages - 1
    _, dp_index, mp_index = groups.coords()
    members = [groups.world_rank(0, dp_index, mp_index), groups.world_rank(last, dp_index, mp_index)]
    tied, tie_group = None, None
    if groups.stage in (0, last) and last > 0:  # a single stage holds one table: nothing to tie
        tie_group = create_group(f"gpt_tied_embedding_{dp_index}_{mp_index}", members)
        tied = gpt.embedding.embedding_table if groups.stage == 0 else cells[-1].output_table
    return pipeline, tied, tie_group
