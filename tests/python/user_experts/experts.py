"""A user's experts module written against moenum's contract (interfaces.md, "External backends under
test"), as the README's "Verify your own kernel" shows it: the GEMMs in fp32 on the dtype's values,
rounded to the dtype once; autograd backward. `make` is correct; `make_bf16_act` rounds the
activation to bf16 before the probs multiply (a double rounding, stage a); `make_unscaled_bias`
adds FC2's bias without scaling it by the probs (stage out)."""
import torch
import torch.nn.functional as F


class MyExperts:
    def __init__(self, spec, bf16_act=False, unscaled_bias=False):
        self.spec, self.bf16_act, self.unscaled_bias = spec, bf16_act, unscaled_bias

    def load_weights(self, w1, b1, w2, b2):
        leaf = lambda t: None if t is None else t.float().requires_grad_(True)
        self.w1, self.b1, self.w2, self.b2 = leaf(w1), leaf(b1), leaf(w2), leaf(b2)

    def __call__(self, hidden, tokens_per_expert, probs):
        dt, outs = hidden.dtype, []
        self.saved = {"h": [], "act": [], "a": [], "o": []}
        rows = torch.split(hidden, tokens_per_expert.tolist())
        ps = torch.split(probs, tokens_per_expert.tolist())
        for e, (x, p) in enumerate(zip(rows, ps)):
            h = (x.float() @ self.w1[e].t()).to(dt)
            if self.b1 is not None:
                h = (h.float() + self.b1[e]).to(dt)
            g, l = h.float().chunk(2, dim=-1)
            act = F.silu(g) * l
            scaled = act.to(torch.bfloat16).float() if self.bf16_act else act  # the planted double rounding
            a = (scaled * p[:, None]).to(dt)
            o = (a.float() @ self.w2[e].t()).to(dt)
            if self.b2 is None:
                out = o
            elif self.unscaled_bias:
                out = (o.float() + self.b2[e]).to(dt)
            else:
                out = (o.float() + self.b2[e] * p[:, None]).to(dt)
            for k, v in zip(self.saved, (h, act, a, o)):
                self.saved[k].append(v)
            outs.append(out)
        return torch.cat(outs)

    def weight_grads(self):
        return {"dw1": self.w1.grad, "db1": None if self.b1 is None else self.b1.grad,
                "dw2": self.w2.grad, "db2": None if self.b2 is None else self.b2.grad}

    def stages(self):
        return {k: torch.cat([t.detach() for t in v]) for k, v in self.saved.items()}


def make(spec):
    return MyExperts(spec)


def make_bf16_act(spec):
    return MyExperts(spec, bf16_act=True)


def make_unscaled_bias(spec):
    return MyExperts(spec, unscaled_bias=True)
