"""AlphaZero on tic-tac-toe: the policy-value network against numpy, the loss, root noise, self-play
samples, and the job end to end on a tiny budget."""
import json

import numpy as np
import pytest

from mstrain import Tensor
from mstrain.kernels import native_module
from mstrain.reinforcement.alphazero import AlphaZero, AlphaZeroReplay, PolicyValueNet, with_root_noise
from mstrain.reinforcement.mcts import MCTS, TicTacToe

native = pytest.mark.skipif(native_module("mstrain.reinforcement", "mcts") is None,
                            reason="needs the C++ extension (pip install -e .)")


def _numpy_forward(net, obs):
    """The network in numpy from its parameters: ReLU MLP body, policy logits and tanh value."""
    params = {name: p.asnumpy().astype(np.float64) for name, p in net.parameters_and_names()}
    dense = sorted({name.rsplit(".", 1)[0] for name in params if name.startswith("body")},
                   key=lambda n: int(n.split(".")[1]))
    h = obs.astype(np.float64)
    for layer in dense:
        h = np.maximum(h @ params[layer + ".weight"].T + params[layer + ".bias"], 0.0)
    logits = h @ params["policy_head.weight"].T + params["policy_head.bias"]
    value = np.tanh(h @ params["value_head.weight"].T + params["value_head.bias"])[:, 0]
    return logits, value


def _boards(n, seed=0):
    rng, game, obs = np.random.default_rng(seed), TicTacToe(), []
    for _ in range(n):
        state = game.initial()
        for _ in range(rng.integers(0, 6)):
            state = game.play(state, int(rng.choice(game.legal_moves(state))))
        obs.append(game.encode(state))
    return np.stack(obs)


def test_network_outputs_match_numpy_and_are_normalised():
    net, obs = PolicyValueNet(hidden=(32, 16)), _boards(7)
    logits, value = net(Tensor(obs))
    assert logits.shape == (7, 9) and value.shape == (7,)
    ref_logits, ref_value = _numpy_forward(net, obs)
    np.testing.assert_allclose(logits.asnumpy(), ref_logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value.asnumpy(), ref_value, rtol=1e-4, atol=1e-5)
    priors, values = net.evaluate(obs)
    softmax = np.exp(ref_logits - ref_logits.max(1, keepdims=True))
    np.testing.assert_allclose(priors, softmax / softmax.sum(1, keepdims=True), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(priors.sum(1), 1.0, rtol=1e-5)
    assert np.all(np.abs(values) < 1.0)


def test_loss_matches_numpy_and_training_decreases_it_on_a_fixed_batch():
    agent = AlphaZero(hidden=(32, 32), lr=3e-3, weight_decay=1e-4, value_weight=0.5, minibatch=16, seed=3)
    rng = np.random.default_rng(1)
    obs = _boards(16, seed=1)
    policy = rng.dirichlet(np.ones(9), 16).astype(np.float32)
    value = rng.choice([-1.0, 0.0, 1.0], 16).astype(np.float32)
    logits, v = _numpy_forward(agent.net, obs)
    log_softmax = logits - logits.max(1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(1, keepdims=True))
    expected = -(policy * log_softmax).sum(1).mean() + 0.5 * ((v - value) ** 2).mean()
    first = float(agent.loss_cell(Tensor(obs), Tensor(policy), Tensor(value)).asnumpy())
    assert first == pytest.approx(expected, rel=1e-4)
    agent.replay.add(obs, policy, value)
    agent.replay.sample = lambda n, rng: (obs, policy, value)  # the same batch every step
    agent.train(40)
    after = float(agent.loss_cell(Tensor(obs), Tensor(policy), Tensor(value)).asnumpy())
    floor = -(policy * np.log(policy)).sum(1).mean()  # the targets' entropy: the cross-entropy's minimum
    assert after - floor < 0.5 * (first - floor)


def test_replay_overwrites_the_oldest():
    replay = AlphaZeroReplay(capacity=5)
    for start in (0, 3):
        values = np.arange(start, start + 3, dtype=np.float32)
        replay.add(np.zeros((3, 18)), np.zeros((3, 9)), values)
    assert replay.size == 5 and sorted(replay.value.tolist()) == [1, 2, 3, 4, 5]


@native
def test_root_noise_changes_only_the_root_priors():
    game, net = TicTacToe(), PolicyValueNet(hidden=(16,))
    state = game.play(game.initial(), 4)
    noise = np.random.default_rng(0).dirichlet(np.full(9, 0.3)).astype(np.float32)
    noisy = with_root_noise(net.evaluate, game.encode(state), noise, 0.25)
    search = MCTS("tictactoe", selection="puct", evaluator=noisy, batch_size=4)
    search.advance(4)
    stats = search.run(40).root_stats()
    priors, _ = net.evaluate(game.encode(state)[None])
    legal = game.legal_moves(state)
    mixed = 0.75 * priors[0, legal] + 0.25 * noise[legal]
    np.testing.assert_allclose(stats["priors"], mixed / mixed.sum(), rtol=1e-5)
    child = game.play(state, stats["moves"][0])
    search.advance(stats["moves"][0])
    child_priors = net.evaluate(game.encode(child)[None])[0][0, game.legal_moves(child)]
    np.testing.assert_allclose(search.root_stats()["priors"], child_priors / child_priors.sum(), rtol=1e-5)


@native
def test_self_play_samples_follow_the_game():
    agent = AlphaZero(hidden=(16,), simulations=16, leaf_batch=4, seed=5)
    game = TicTacToe()
    for _ in range(3):
        boards, policies, outcomes = agent.self_play_game()
        np.testing.assert_allclose(policies.sum(1), 1.0, rtol=1e-6)
        occupied = boards[:, :9] + boards[:, 9:]
        assert np.all(policies[occupied > 0] == 0)  # no visits to taken cells
        for before, after in zip(occupied[:-1], occupied[1:]):
            assert after.sum() == before.sum() + 1 and np.all(after >= before)  # one move a ply
        state = (_bits(boards[-1][:9]), _bits(boards[-1][9:]), int(occupied[-1].sum()))
        ends = {m: game.terminal_value(game.play(state, m)) for m in game.legal_moves(state)}
        # the last mover cannot lose: +1 when a winning move was there, 0 only on the board's last cell
        assert outcomes[-1] == (1.0 if 1.0 in ends.values() else 0.0)
        if outcomes[-1] == 0.0:
            assert list(ends.values()) == [0.0]
        signs = np.where(np.arange(len(outcomes))[::-1] % 2 == 0, 1.0, -1.0)
        np.testing.assert_array_equal(outcomes, outcomes[-1] * signs)  # players alternate


def _bits(cells):
    return int(sum(1 << c for c in np.flatnonzero(cells)))


@native
def test_play_vs_minimax_counts_every_game():
    agent = AlphaZero(hidden=(16,), eval_simulations=8, seed=0)
    for simulations in (None, 0):
        results = agent.play_vs_minimax(games=4, simulations=simulations)
        assert set(results) == {"wins", "draws", "losses"} and sum(results.values()) == 4
        assert results["wins"] == 0  # perfect play never loses


@native
def test_job_runs_a_couple_of_iterations(mstrain, repo_root, tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(repo_root)
    code, out, err = mstrain("--config", "configs/alphazero_tictactoe.yaml", "train.iterations=2",
                             "self_play.games_per_iteration=3", "self_play.simulations=16",
                             "train.steps_per_iteration=4", "train.minibatch=8", "evaluation.games=2",
                             "evaluation.simulations=8", "evaluation.every=1", "network.hidden=[16]",
                             f"train.output_dir={tmp_path}")
    assert code == 0, err
    result = json.loads([l for l in out.splitlines() if l.startswith("alphazero_tictactoe: ")][-1].split(": ", 1)[1])
    assert result["self_play_games"] == 6 and result["iterations"] == 2
    assert result["wins"] + result["draws"] + result["losses"] == 2 and result["wins"] == 0
    assert "iter 1/2 games 3" in caplog.text and "vs minimax W/D/L" in caplog.text and "done: vs minimax" in caplog.text
    history = json.loads((tmp_path / "history.json").read_text())
    assert [h["games"] for h in history["history"]] == [3, 6] and np.isfinite(history["summary"]["final_loss"])


def test_bad_key_exits_2_naming_it(mstrain, repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    code, out, err = mstrain("--config", "alphazero_tictactoe", "self_play.noise_fraction=2")
    assert code == 2 and "self_play.noise_fraction" in err, err
