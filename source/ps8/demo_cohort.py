"""The demo cohort's ps8 code, by persona and solution cell: reference solutions with small
changes, so instructor side only (grader/cohort/demo.py: each persona, and why this file is here)."""

_PS8_OP = '''@torch.library.custom_op("ps8::rms_pool", mutates_args=())
def rms_pool_op(x: torch.Tensor) -> torch.Tensor:
    return rms_pool(x)


@rms_pool_op.register_fake
def _rms_pool_fake(x):
    return x.new_empty(*x.shape[:-1], {length})
'''
_PS8_AUTOGRAD = '''

def _save(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], output)


def _backward(ctx, grad):
    x, y = ctx.saved_tensors
    spread = (grad / (2 * y)).unsqueeze(-1).expand(*grad.shape, 2).flatten(-2)
    return spread[..., : x.shape[-1]] * x


rms_pool_op.register_autograd(_backward, setup_context=_save)
'''
DEMO_SOLUTIONS = {
    # The operator and its fake, but no autograd formula: the layers before the library call get
    # no gradient (a custom operator without register_autograd cannot be differentiated), so the
    # loss's gradients are wrong and nothing is credited.
    "partial": {"ps8-q1-solution": _PS8_OP.format(length="(x.shape[-1] + 1) // 2") + '''

class FixedSignalModel(SignalModel):
    def pool(self, h):
        return rms_pool_op(h)
'''},
    # Everything right, but pool also calls the library four more times, on a 16x longer input,
    # and throws the results away (times zero): correct, one graph, the operator checked; several
    # times slower than the baseline (four calls on the step's own input cost ~1.4 ms of a ~5 ms
    # step, within the timing's noise: a quiet run once credited them).
    "slow": {"ps8-q1-solution": _PS8_OP.format(length="(x.shape[-1] + 1) // 2") + _PS8_AUTOGRAD + '''

class FixedSignalModel(SignalModel):
    def pool(self, h):
        y = rms_pool_op(h)
        for k in range(4):
            y = y + 0.0 * rms_pool_op(h.repeat(1, 1, 16) + float(k + 1)).mean()   # wasted work
        return y
'''},
    # A fake that says T // 2: right for even windows, wrong for odd ones (the last step has a
    # pair of its own). Eagerly correct (the real kernel runs), but the compiled model cannot be
    # traced on odd windows, and the operator check names the shape.
    "wrong": {"ps8-q1-solution": _PS8_OP.format(length="x.shape[-1] // 2") + _PS8_AUTOGRAD + '''

class FixedSignalModel(SignalModel):
    def pool(self, h):
        return rms_pool_op(h)
'''},
}
