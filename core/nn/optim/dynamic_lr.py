"""Per-step learning-rate lists (MindSpore's `nn.dynamic_lr`): pass the list as `learning_rate`.

Epoch-based functions use current_epoch = floor(i / step_per_epoch) for step i.
"""
import math

from ...errors import ConfigError


def _check_int(value, name, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an int >= {minimum}, got {value!r}", key=name)


def _check_steps(total_step, step_per_epoch, decay_epoch):
    _check_int(total_step, "total_step")
    _check_int(step_per_epoch, "step_per_epoch")
    _check_int(decay_epoch, "decay_epoch")


def piecewise_constant_lr(milestone, learning_rates):
    """learning_rates[j] for the steps before milestone[j] (milestone strictly increasing)."""
    if len(milestone) != len(learning_rates):
        raise ConfigError(f"milestone has {len(milestone)} entries but learning_rates has "
                          f"{len(learning_rates)}", key="milestone")
    lrs, start = [], 0
    for end, lr in zip(milestone, learning_rates):
        _check_int(end, "milestone")
        if end <= start:
            raise ConfigError(f"milestone must be strictly increasing, got {list(milestone)}", key="milestone")
        lrs += [float(lr)] * (end - start)
        start = end
    return lrs


def exponential_decay_lr(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair=False):
    """lr * decay_rate^(current_epoch / decay_epoch) (exponent floored when is_stair)."""
    _check_steps(total_step, step_per_epoch, decay_epoch)
    return [learning_rate * decay_rate ** _ratio(i, step_per_epoch, decay_epoch, is_stair)
            for i in range(total_step)]


def natural_exp_decay_lr(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair=False):
    """lr * exp(-decay_rate * current_epoch) (MindSpore's formula; with is_stair the epoch is rounded
    down to a multiple of decay_epoch)."""
    _check_steps(total_step, step_per_epoch, decay_epoch)
    return [learning_rate * math.exp(-decay_rate * _epoch_tick(i, step_per_epoch, decay_epoch, is_stair))
            for i in range(total_step)]


def inverse_decay_lr(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair=False):
    """lr / (1 + decay_rate * current_epoch / decay_epoch) (exponent floored when is_stair)."""
    _check_steps(total_step, step_per_epoch, decay_epoch)
    return [learning_rate / (1 + decay_rate * _ratio(i, step_per_epoch, decay_epoch, is_stair))
            for i in range(total_step)]


def _ratio(i, step_per_epoch, decay_epoch, is_stair):
    ratio = math.floor(i / step_per_epoch) / decay_epoch
    return math.floor(ratio) if is_stair else ratio


def _epoch_tick(i, step_per_epoch, decay_epoch, is_stair):
    """MindSpore's natural_exp_decay_lr: the epoch itself, rounded down to a multiple of decay_epoch when stair."""
    epoch = math.floor(i / step_per_epoch)
    return math.floor(epoch / decay_epoch) * decay_epoch if is_stair else epoch


def cosine_decay_lr(min_lr, max_lr, total_step, step_per_epoch, decay_epoch):
    """min_lr + 0.5 (max_lr - min_lr) (1 + cos(pi * min(current_epoch, decay_epoch) / decay_epoch))."""
    _check_steps(total_step, step_per_epoch, decay_epoch)
    delta = 0.5 * (max_lr - min_lr)
    return [min_lr + delta * (1 + math.cos(math.pi * min(math.floor(i / step_per_epoch), decay_epoch) / decay_epoch))
            for i in range(total_step)]


def polynomial_decay_lr(learning_rate, end_learning_rate, total_step, step_per_epoch, decay_epoch, power,
                        update_decay_epoch=False):
    """(lr - end_lr) (1 - tmp_epoch / tmp_decay_epoch)^power + end_lr, tmp_epoch = min(epoch, decay_epoch);
    with update_decay_epoch the horizon becomes decay_epoch * max(ceil(epoch / decay_epoch), 1)."""
    _check_steps(total_step, step_per_epoch, decay_epoch)
    delta = learning_rate - end_learning_rate
    lrs = []
    for i in range(total_step):
        epoch = math.floor(i / step_per_epoch)
        if update_decay_epoch:
            horizon, tmp = decay_epoch * max(math.ceil(epoch / decay_epoch), 1), epoch
        else:
            horizon, tmp = decay_epoch, min(epoch, decay_epoch)
        lrs.append(delta * (1 - tmp / horizon) ** power + end_learning_rate)
    return lrs


def warmup_lr(learning_rate, total_step, step_per_epoch, warmup_epoch):
    """lr * min(current_epoch, warmup_epoch) / warmup_epoch."""
    _check_int(total_step, "total_step")
    _check_int(step_per_epoch, "step_per_epoch")
    _check_int(warmup_epoch, "warmup_epoch")
    return [learning_rate * min(math.floor(i / step_per_epoch), warmup_epoch) / warmup_epoch
            for i in range(total_step)]


__all__ = ["piecewise_constant_lr", "exponential_decay_lr", "natural_exp_decay_lr", "inverse_decay_lr",
           "cosine_decay_lr", "polynomial_decay_lr", "warmup_lr"]
