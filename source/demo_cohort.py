"""The demo cohort's problem-specific submissions, per problem set: solution cell -> its text.

Instructor side only: this file lives in source/, which students never get, because these are
the reference solutions with small changes. `make grade` builds the demo cohort from it (with
the release notebooks and the reference solutions) when submitted/ is empty; see grader/cohort/demo.py.
Personas: "partial" (half done), "slow" (correct, one graph, wasted work), "wrong" (fast, wrong).
"""

DEMO_SOLUTIONS = {}

# --- ps1 --------------------------------------------------------------------------------
DEMO_SOLUTIONS["ps1"] = {
    # Fixed the `if` and the `print`, kept `.item()` and the mask: correct, two breaks left.
    "partial": {"ps1-q1-solution": '''class FixedModel(Original):
    def forward(self, x):
        h = self.fc1(x)
        h = torch.where(x.mean() > 0, torch.tanh(h) * 1.5, torch.sigmoid(h) - 0.5)
        scale = h.abs().max().item()
        h = h / (scale + 1e-6)
        pos_mean = h[h > 0].mean()
        h = torch.sin(h - pos_mean) * torch.cos(h + pos_mean)
        return torch.tanh(self.fc2(h).exp())
'''},
    # One graph and correct, but forward also computes a large product it throws away.
    "slow": {"ps1-q1-solution": '''class FixedModel(Original):
    def forward(self, x):
        h = self.fc1(x)
        h = torch.where(x.mean() > 0, torch.tanh(h) * 1.5, torch.sigmoid(h) - 0.5)
        h = h + 0.0 * torch.tanh((x @ x.T @ x).mean())   # wasted work
        scale = h.abs().max()
        h = h / (scale + 1e-6)
        pos = h > 0
        pos_mean = torch.where(pos, h, 0.0).sum() / pos.sum()
        h = torch.sin(h - pos_mean) * torch.cos(h + pos_mean)
        return torch.tanh(self.fc2(h).exp())
'''},
    # Fast, but only one side of the `if`: right on the visible inputs, wrong on the hidden ones.
    "wrong": {"ps1-q1-solution": '''class FixedModel(Original):
    def forward(self, x):
        h = torch.tanh(self.fc1(x)) * 1.5
        scale = h.abs().max()
        h = h / (scale + 1e-6)
        pos = h > 0
        pos_mean = torch.where(pos, h, 0.0).sum() / pos.sum()
        h = torch.sin(h - pos_mean) * torch.cos(h + pos_mean)
        return torch.tanh(self.fc2(h).exp())
'''},
}

# --- ps2 --------------------------------------------------------------------------------
DEMO_SOLUTIONS["ps2"] = {
    # Correct, but the loop over groups and the slice writes are still there (not fused).
    "partial": {"ps2-q1-solution": '''class FusedGroupNormGELU(GroupNormGELU):
    pass
'''},
    # Fused the same way as the reference, but each element also goes through a chain of
    # wasted transcendental functions: 30 of them, about 7x the reference's time per call on the
    # 2-core CPU (12.6 ms against 1.8 ms compiled), far from its speed target. A longer chain
    # only made every eager call of the grading (201 of them for the recompile count) slower.
    "slow": {"ps2-q1-solution": '''class FusedGroupNormGELU(GroupNormGELU):
    def forward(self, x):
        rows, d = x.shape
        xs = x.view(rows, self.groups, d // self.groups)
        mu = xs.mean(dim=-1, keepdim=True)
        var = ((xs - mu) ** 2).mean(dim=-1, keepdim=True)
        y = ((xs - mu) / torch.sqrt(var + self.eps)).view(rows, d) * self.weight + self.bias
        waste = y
        for _ in range(10):
            waste = torch.sin(torch.exp(torch.tanh(waste)))
        y = y + 0.0 * waste
        return 0.5 * y * (1.0 + torch.tanh(0.7978845608 * (y + 0.044715 * y ** 3)))
'''},
    # Fused and fast, but ReLU instead of the tanh-GELU.
    "wrong": {"ps2-q1-solution": '''class FusedGroupNormGELU(GroupNormGELU):
    def forward(self, x):
        rows, d = x.shape
        xs = x.view(rows, self.groups, d // self.groups)
        mu = xs.mean(dim=-1, keepdim=True)
        var = ((xs - mu) ** 2).mean(dim=-1, keepdim=True)
        y = ((xs - mu) / torch.sqrt(var + self.eps)).view(rows, d) * self.weight + self.bias
        return torch.relu(y)
'''},
}

# --- ps3 --------------------------------------------------------------------------------
# ("partial": question 1 only, the default.)
DEMO_SOLUTIONS["ps3"] = {
    # A valid rule that never compiles (right for the short jobs, slow for the long ones), and a
    # scorer padded to 64 rows that keeps the per-row loop: correct, one graph, one compile, but
    # a copy of the loop's body in the graph for every row.
    "slow": {"ps3-q1-solution": '''class JobPlanner:
    @staticmethod
    def mode_for(calls: int, device: str) -> str:
        return "none"   # never pays a compile
''', "ps3-q2-solution": '''class BatchScorer(PerSampleScorer):
    def forward(self, x):
        n = x.shape[0]
        padded = torch.cat([x, x.new_zeros(64 - n, x.shape[1])])   # always 64 rows
        rows = []
        for i in range(64):
            r = torch.relu(self.fc(padded[i]))
            rows.append(r / (r.norm() + 1e-6))
        return torch.stack(rows)[:n]
'''},
    # The break-even formula with its units mixed up (microseconds saved against seconds of
    # compile), so it compiles every job, short ones too.
    "wrong": {"ps3-q1-solution": '''class JobPlanner:
    @staticmethod
    def mode_for(calls: int, device: str) -> str:
        saved_us, compile_s = 140 - 55, 5.0
        return "reduce-overhead" if calls * saved_us > compile_s else "none"
'''},
}

# --- ps4 --------------------------------------------------------------------------------
DEMO_SOLUTIONS["ps4"] = {
    # The two habits deleted (one graph, no counter), but compiled as torch.compile's default
    # would: the first prompt length is baked in, and the second recompiles.
    "partial": {"ps4-q1-solution": '''class FastGPT(TinyGPT):
    def forward(self, idx):
        B, T = idx.shape
        x = self.emb(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = x + self.attention(blk, x)
            x = x + self.mlp(blk, x)
        logits = self.head(self.ln(x[:, -1]))
        return torch.softmax(logits, dim=-1)
'''},
    # One graph for every length, correct; but the blocks run twice.
    "slow": {"ps4-q1-solution": '''class FastGPT(TinyGPT):
    compile_dynamic = True

    def forward(self, idx):
        B, T = idx.shape
        x = self.emb(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = x + self.attention(blk, x)
            x = x + self.mlp(blk, x)
        waste = x
        for blk in self.blocks:                      # wasted work
            waste = waste + self.attention(blk, waste)
            waste = waste + self.mlp(blk, waste)
        x = x + 0.0 * torch.tanh(waste)
        logits = self.head(self.ln(x[:, -1]))
        return torch.softmax(logits, dim=-1)
'''},
    # Fast, but the final layer norm is skipped.
    "wrong": {"ps4-q1-solution": '''class FastGPT(TinyGPT):
    compile_dynamic = True

    def forward(self, idx):
        B, T = idx.shape
        x = self.emb(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = x + self.attention(blk, x)
            x = x + self.mlp(blk, x)
        logits = self.head(x[:, -1])
        return torch.softmax(logits, dim=-1)
'''},
}

# --- ps5 --------------------------------------------------------------------------------
DEMO_SOLUTIONS["ps5"] = {
    # The breaks fixed (one graph), but the example counter still changes every step.
    "partial": {"ps5-q1-solution": '''class FastClassifier(Classifier):
    def forward(self, x, y):
        self.examples_seen += x.shape[0]
        h = self.block(self.fc1, self.ln1, x)
        h = self.block(self.fc2, self.ln2, h)
        return F.cross_entropy(self.head(h), y, ignore_index=IGNORE, label_smoothing=0.1)
'''},
    # One graph, no recompiles, correct; but a second pass through the blocks joins the loss
    # (times zero), so the backward pays for it too.
    "slow": {"ps5-q1-solution": '''class FastClassifier(Classifier):
    def forward(self, x, y):
        h = self.block(self.fc1, self.ln1, x)
        h = self.block(self.fc2, self.ln2, h)
        waste = self.block(self.fc2, self.ln2, self.block(self.fc1, self.ln1, x @ x.T @ x))
        loss = F.cross_entropy(self.head(h), y, ignore_index=IGNORE, label_smoothing=0.1)
        return loss + 0.0 * waste.sum()
'''},
    # Fast and one graph, but the unlabeled examples count in the loss (as class 0).
    "wrong": {"ps5-q1-solution": '''class FastClassifier(Classifier):
    def forward(self, x, y):
        h = self.block(self.fc1, self.ln1, x)
        h = self.block(self.fc2, self.ln2, h)
        return F.cross_entropy(self.head(h), y.clamp(min=0), label_smoothing=0.1)
'''},
}

# --- ps6 --------------------------------------------------------------------------------
_PS6_ATTENTION = '''
    def __init__(self):
        super().__init__()
        shape = (LAYERS, MAX_BATCH, HEADS, MAX_SEQ, HEAD_DIM)
        self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape), persistent=False)

    def forward(self, tokens, pos):
        x = (self.emb(tokens) + self.pos(pos))[:, None]
        visible = torch.arange(MAX_SEQ, device=tokens.device) <= pos
        for i, blk in enumerate(self.blocks):
            B = x.shape[0]
            q, k, v = blk.qkv(blk.ln1(x)).split(DIM, dim=-1)
            q, k, v = (t.view(B, 1, HEADS, HEAD_DIM).transpose(1, 2) for t in (q, k, v))
            self.k_cache[i].index_copy_(2, pos.view(1), k)
            self.v_cache[i].index_copy_(2, pos.view(1), v)
            ATTEND
            x = x + blk.proj((att @ values).transpose(1, 2).reshape(B, 1, DIM))
            x = x + self.mlp(blk, x)
        return self.head(self.ln(x[:, 0]))
'''
DEMO_SOLUTIONS["ps6"] = {
    # A cache, but sliced to the positions so far: `int(pos)` stops the graph (and the slice's
    # shape grows every step). Right logits, not one graph.
    "partial": {"ps6-q1-solution": "class CachedGPT(TinyGPT):" + _PS6_ATTENTION.replace(
        "ATTEND", "n = int(pos) + 1\n"
        "            keys, values = self.k_cache[i, :, :, :n], self.v_cache[i, :, :, :n]\n"
        "            att = softmax_last((q @ keys.transpose(-2, -1)) / math.sqrt(HEAD_DIM))")},
    # One graph, no recompiles, right logits, but no cache: every step recomputes all MAX_SEQ
    # positions of the tokens so far (masked), so it is no faster than the baseline.
    "slow": {"ps6-q1-solution": '''class CachedGPT(TinyGPT):
    def forward(self, tokens, pos):
        self.history.index_copy_(1, pos.view(1), tokens[:, None])
        x = self.emb(self.history) + self.pos(torch.arange(MAX_SEQ, device=tokens.device))
        for blk in self.blocks:
            x = x + self.attention(blk, x)
            x = x + self.mlp(blk, x)
        last = torch.index_select(x, 1, pos.view(1))[:, 0]
        return self.head(self.ln(last))
'''},
    # A cache and one graph, but no mask: each step also attends to the positions after `pos`.
    "wrong": {"ps6-q1-solution": "class CachedGPT(TinyGPT):" + _PS6_ATTENTION.replace(
        "ATTEND", "keys, values = self.k_cache[i], self.v_cache[i]\n"
        "            att = softmax_last((q @ keys.transpose(-2, -1)) / math.sqrt(HEAD_DIM))")},
}

# --- ps7 --------------------------------------------------------------------------------
DEMO_SOLUTIONS["ps7"] = {
    # Found and fixed the floor division (right eagerly and compiled), but kept the Python
    # counter: one graph, but a compile per call, so speed is not credited.
    "partial": {"ps7-q1-solution": '''class FixedSensorModel(SensorModel):
    def bucket(self, t):
        rel = t - t[:, :1]
        return torch.round((rel - torch.fmod(rel, BUCKET_S)) / BUCKET_S).long().clamp(max=BUCKETS - 1)
'''},
    # Both causes fixed, right compiled, one graph, one compile; but forward also runs the MLP
    # block three more times and throws the results away (times zero).
    "slow": {"ps7-q1-solution": '''class FixedSensorModel(SensorModel):
    def bucket(self, t):
        rel = t - t[:, :1]
        return torch.round((rel - torch.fmod(rel, BUCKET_S)) / BUCKET_S).long().clamp(max=BUCKETS - 1)

    def forward(self, t, x):
        h = self.inp(x) + self.when(self.bucket(t))
        for _ in range(3):
            h = h + 0.0 * self.fc2(self.gelu(self.fc1(self.norm1(h + 1.0))))   # wasted work
        h = h + self.fc2(self.gelu(self.fc1(self.norm1(h))))
        return self.head(self.norm2(h))
'''},
    # The blind rewrite: floor(t / B) instead of `//`, no counter. Fast and one graph, and what
    # Inductor computes -- but eager's buckets were the model's, so the outputs are wrong.
    "wrong": {"ps7-q1-solution": '''class FixedSensorModel(SensorModel):
    def bucket(self, t):
        return torch.floor((t - t[:, :1]) / BUCKET_S).long().clamp(max=BUCKETS - 1)

    def forward(self, t, x):
        h = self.inp(x) + self.when(self.bucket(t))
        h = h + self.fc2(self.gelu(self.fc1(self.norm1(h))))
        return self.head(self.norm2(h))
'''},
}

# --- ps8 --------------------------------------------------------------------------------
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
DEMO_SOLUTIONS["ps8"] = {
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
