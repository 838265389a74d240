"""W6's floor: the training step written by hand in numpy, and its matrix products alone.

`NumpyStep` is the whole W6 step (forward, softmax cross-entropy, backward, SGD momentum) with
every buffer allocated once and every update in place; `gemms()` runs only its five matrix
products (two forward, the two weight gradients and the hidden-layer gradient) into the same
buffers. Those products are what no compiled step can avoid: the loop sink's distance to them is
what elementwise kernels, the loss, the momentum update and the glue between kernels cost.
"""
import numpy as np

LR, MOMENTUM = 0.01, 0.9


class NumpyStep:
    """W6 by hand: weights in the peer's (in, out) layout, batches of (32, 784) and (32,) labels."""

    def __init__(self, init, batch, classes):
        self.w1, self.b1 = init["w1"].copy(), init["b1"].copy()
        self.w2, self.b2 = init["w2"].copy(), init["b2"].copy()
        self.params = [self.w1, self.b1, self.w2, self.b2]
        self.velocity = [np.zeros_like(p) for p in self.params]
        hidden = self.w1.shape[1]
        f32 = np.float32
        self.h = np.empty((batch, hidden), f32)
        self.logits = np.empty((batch, classes), f32)
        self.peak = np.empty((batch, 1), f32)
        self.total = np.empty((batch, 1), f32)
        self.dh = np.empty((batch, hidden), f32)
        self.grads = [np.empty_like(p) for p in self.params]
        self.rows = np.arange(batch)
        self.scratch = [np.empty_like(p) for p in self.params]

    def gemms(self, x):
        """The step's matrix products only."""
        np.matmul(x, self.w1, self.h)
        np.matmul(self.h, self.w2, self.logits)
        np.matmul(self.h.T, self.logits, self.grads[2])
        np.matmul(self.logits, self.w2.T, self.dh)
        np.matmul(x.T, self.dh, self.grads[0])

    def __call__(self, x, y):
        """One training step; returns the loss (mean softmax cross-entropy before the update)."""
        h, logits, dh = self.h, self.logits, self.dh
        np.matmul(x, self.w1, h)
        h += self.b1
        np.maximum(h, 0, h)
        np.matmul(h, self.w2, logits)
        logits += self.b2
        np.max(logits, 1, keepdims=True, out=self.peak)
        logits -= self.peak
        np.exp(logits, logits)
        np.sum(logits, 1, keepdims=True, out=self.total)
        picked = logits[self.rows, y]
        loss = float(np.mean(np.log(self.total[:, 0]) - np.log(picked)))
        logits /= self.total                      # softmax, then its gradient in place
        logits[self.rows, y] -= 1
        logits *= 1.0 / x.shape[0]
        gw1, gb1, gw2, gb2 = self.grads
        np.matmul(h.T, logits, gw2)
        np.sum(logits, 0, out=gb2)
        np.matmul(logits, self.w2.T, dh)
        dh *= h > 0
        np.matmul(x.T, dh, gw1)
        np.sum(dh, 0, out=gb1)
        for p, v, g, tmp in zip(self.params, self.velocity, self.grads, self.scratch):
            v *= MOMENTUM
            v += g
            np.multiply(v, LR, tmp)
            p -= tmp
        return loss
