"""Model compression in MindSpore Golden Stick's shape: one algorithm interface (`CompAlgo`:
`apply(net)` rewrites a network for training, `callbacks()` gives the training-time callbacks,
`convert(net)` gives the deployable network) on a public network-rewriting API (`find_cells`,
`replace_cell`, `insert_before`, `insert_after`, `fold_conv_bn`).
"""
from .rewrite import (InsertedCells, conv_bn_pairs, find_cells, fold_conv_bn, folded_conv, get_cell,
                      insert_after, insert_before, replace_cell)
from .base import AlgoConfig, CompAlgo
from .fake_quant import ActivationQuantizer, fake_quant_weight
from .int8 import Int8Conv2d, Int8Dense, load_quantized, model_bytes, save_quantized, to_int8
from .qat import (FreezeBnCallback, QatConfig, QuantConv2d, QuantConv2dBnFold, QuantDense,
                  SimulatedQuantizationAwareTraining)
from .scop import (KnockoffConv2dBn, KnockoffTrainNetwork, PrunerFtCompressAlgo, PrunerKfCompressAlgo, ScopConfig,
                   count_macs, count_params, gaussian_knockoffs, pair_with_knockoffs)
from .channels import ChannelGroup, channel_groups
from .slb import SlbConfig, SlbLayer, SlbQuantAwareTraining, TemperatureScheduler, slb_values

__all__ = ["find_cells", "get_cell", "replace_cell", "insert_before", "insert_after", "conv_bn_pairs",
           "fold_conv_bn", "folded_conv", "InsertedCells", "CompAlgo", "AlgoConfig", "ActivationQuantizer",
           "fake_quant_weight", "Int8Conv2d", "Int8Dense", "to_int8", "save_quantized", "load_quantized",
           "model_bytes", "QatConfig", "SimulatedQuantizationAwareTraining", "QuantConv2d", "QuantDense",
           "QuantConv2dBnFold", "FreezeBnCallback", "SlbConfig", "SlbLayer", "SlbQuantAwareTraining",
           "TemperatureScheduler", "slb_values", "ScopConfig", "PrunerKfCompressAlgo", "PrunerFtCompressAlgo",
           "KnockoffConv2dBn", "KnockoffTrainNetwork", "gaussian_knockoffs", "pair_with_knockoffs", "count_params",
           "count_macs", "ChannelGroup", "channel_groups"]
