"""The demo cohort's problem-specific submissions, per problem set: solution cell -> its text.

Instructor side only: this file lives in source/, which students never get, because these are
the reference solutions with small changes. `make grade` builds the demo cohort from it (with
the release notebooks and the reference solutions) when submitted/ is empty; see grader/demo.py.
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
    # wasted transcendental functions.
    "slow": {"ps2-q1-solution": '''class FusedGroupNormGELU(GroupNormGELU):
    def forward(self, x):
        rows, d = x.shape
        xs = x.view(rows, self.groups, d // self.groups)
        mu = xs.mean(dim=-1, keepdim=True)
        var = ((xs - mu) ** 2).mean(dim=-1, keepdim=True)
        y = ((xs - mu) / torch.sqrt(var + self.eps)).view(rows, d) * self.weight + self.bias
        waste = y
        for _ in range(40):
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
    # The right choices, but forward runs the network four times and keeps one result.
    "slow": {"ps3-q1-solution": '''class ShortJobMLP(TinyMLP):
    compile_mode = "none"

    def forward(self, x):
        y = super().forward(x)
        for _ in range(3):
            y = y + 0.0 * super().forward(x + 1.0)   # wasted work
        return y


class LongJobMLP(ShortJobMLP):
    compile_mode = "reduce-overhead"
'''},
    # Compiles both jobs (the short one cannot win its compile back), and the outputs are scaled.
    "wrong": {"ps3-q1-solution": '''class ShortJobMLP(TinyMLP):
    compile_mode = "default"

    def forward(self, x):
        return super().forward(x) * 1.01


class LongJobMLP(ShortJobMLP):
    compile_mode = "default"
'''},
}

# --- ps4 --------------------------------------------------------------------------------
DEMO_SOLUTIONS["ps4"] = {
    # The debug check removed (one graph), but the call counter still changes every call.
    "partial": {"ps4-q1-solution": '''class FastGPT(TinyGPT):
    def forward(self, idx):
        self.calls += 1
        B, T = idx.shape
        x = self.emb(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = x + self.attention(blk, x)
            x = x + self.mlp(blk, x)
            if self.calls % 100 == 1000:
                x = x * 1.0
        logits = self.head(self.ln(x[:, -1]))
        return torch.softmax(logits, dim=-1)
'''},
    # One graph, no recompiles, correct; but the blocks run twice.
    "slow": {"ps4-q1-solution": '''class FastGPT(TinyGPT):
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
