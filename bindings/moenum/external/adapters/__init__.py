"""The bundled external adapters, each an experts module written against moenum's contract
(`FACTORY(spec)` -> load_weights, __call__, weight_grads, stages)."""
