# tests/print_config_params.py: reads a JSON file written by train_gpt --print-config with train_gpt.py's own
# parser (parse_config) and prints the parameter count of the model it describes (embeddings, per layer the
# two norms, QKV, projection and the gated MLP, the final norm, and the head unless tied), for
# tests/t_train_gpt_host.sh to compare with the preset table of train_gpt_cpu --help.
# Called from the repository root as: python3 tests/print_config_params.py CONFIG.json
import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root: train_gpt.py
import train_gpt as t
c = t.parse_config(open(sys.argv[1]).read(), "x")
C, L, F, V = c['n_embd'], c['n_layer'], c['ffn'], c['vocab_size']
qd, kvd = c['n_head'] * c['head_dim'], c['n_kv_head'] * c['head_dim']
n = V * C + L * (2 * C + C * (qd + 2 * kvd) + qd * C + 2 * F * C + F * C) + C + (0 if c['tied'] else V * C)
print(n)
