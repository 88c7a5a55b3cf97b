#!/usr/bin/env python3
"""Write the hand-made seed inputs of tests/fuzz/corpus/ (run from anywhere).

The seeds are committed; this script documents how they were made and
rewrites them. Inputs that once crashed a harness are committed beside the
seeds as regress-* files and are not touched here."""
import gzip, json, os, shutil, struct

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
C = os.path.join(HERE, 'corpus')


def w(rel, b):
    p = os.path.join(C, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    open(p, 'wb').write(b if isinstance(b, bytes) else b.encode())


def cp(src, rel):
    w(rel, open(os.path.join(TESTS, src), 'rb').read())


# config: the file's text, then optionally "%%" and one override per line
w('config/l0_like', 'base = "defaults";\nmodel = { hidden_size = 16; num_layers = 1; num_heads = 2;\n'
  '  num_kv_heads = 1; head_dim = 8; num_experts = 2; top_k = 1; intermediate_size = 16; };\n'
  'train = { steps = 3; seq_length = 32; micro_batch_size = 2; };\n'
  'data = { files = ["lambda_virus.fa.gz"]; };\n')
w('config/overrides', 'base = "defaults";\n%%\ntrain.steps=5\noptimizer.betas=[0.9,0.95]\n'
  'checkpoint.ckpt_dir=/tmp/x\nprecision.compute=bf16\ndata.files=["a.fa","b.fa.gz"]\nlogger.frequency=1\n')
w('config/bad_type', 'base = "defaults";\ntrain = { steps = "many"; };\n')
w('config/unknown_key', 'base = "defaults";\nmodel = { hiden_size = 64; };\n%%\ntrian.steps=1\n')
w('config/syntax', 'model = { hidden_size = 64 \n')
w('config/include', '@include "defaults.cfg"\n')
w('config/no_base', 'model = { hidden_size = 32; num_heads = 4; };\n'
  'scheduler = { warmup_steps = 10; min_lr_ratio = 0.1; };\nruntime = { backend = "cpu"; threads = 2; };\n')

# fasta: a mode byte (0 plain, 1 gzip the rest, 2 the rest as is under a .gz name), then the bytes
fa = open(os.path.join(TESTS, 'data/fasta/mixed.fa'), 'rb').read()
w('fasta/plain_mixed', b'\x00' + fa)
w('fasta/gzip_mixed', b'\x01' + fa)
w('fasta/raw_gz', b'\x02' + open(os.path.join(TESTS, 'data/fasta/mixed.fa.gz'), 'rb').read())
w('fasta/crlf', b'\x00' + open(os.path.join(TESTS, 'data/fasta/mixed_crlf.fa'), 'rb').read())
w('fasta/bad_letter', b'\x00>s1\nACGTXXACGT\n')
w('fasta/no_header', b'\x00ACGT\n>s\nAC\n')
w('fasta/empty_record', b'\x01>a\n>b\nACGT\n')
w('fasta/truncated_gz', b'\x02' + gzip.compress(b'>r\n' + b'ACGT' * 200, mtime=0)[:40])


# safetensors: one file written by the Python library, and hand-built headers
def st(tensors, meta=None):
    hdr, data = {}, b''
    for name, dt, shape, raw in tensors:
        hdr[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [len(data), len(data) + len(raw)]}
        data += raw
    if meta:
        hdr['__metadata__'] = meta
    h = json.dumps(hdr).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    return struct.pack('<Q', len(h)) + h + data


cp('data/ckpt/st_python.safetensors', 'safetensors/python_written')
w('safetensors/dtypes', st([('a', 'F32', [2], struct.pack('<2f', 1, 2)), ('b', 'BF16', [1, 2], b'\x80\x3f\x00\x40'),
                            ('c', 'F16', [2], b'\x00\x3c\x00\x40'), ('d', 'F64', [], struct.pack('<d', 3)),
                            ('e', 'I64', [1], struct.pack('<q', 7)), ('f', 'U8', [0], b'')], {'format': 'pt'}))
w('safetensors/overlap', st([('a', 'F32', [2], b'\0' * 8)]).replace(b'[0, 8]', b'[0, 9]'))
w('safetensors/header_len', struct.pack('<Q', 1 << 40) + b'{}')
w('safetensors/empty_header', struct.pack('<Q', 2) + b'{}')

# json and config.json
for n in ('config_tf4.json', 'config_tf5.json'):
    cp('data/ckpt/' + n, 'json/' + n)
    cp('data/ckpt/' + n, 'hf_config/' + n)
cp('fixtures/hf/gqa_top2/config.json', 'hf_config/gqa_top2.json')
w('json/escapes', '{"s": "a\\u00e9\\ud83d\\ude00\\n\\"", "n": [0, -1.5e3, 1e308, 12345678901234567890], '
  '"t": true, "f": false, "z": null, "o": {}}')
w('json/nested', '[' * 20 + '{"a": [1, 2, {"b": "c"}]}' + ']' * 20)
w('json/trailing_comma', '{"a": 1,}')
w('json/dup_key', '{"a": 1, "a": 2}')
w('json/nul_key', '{"a\\u0000b": 1, "a": 2}')
w('hf_config/sliding_window', '{"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128, '
  '"num_hidden_layers": 2, "num_attention_heads": 4, "num_local_experts": 4, "num_experts_per_tok": 2, '
  '"vocab_size": 256, "sliding_window": 4096}')
w('hf_config/wrong_type', '{"model_type": "llama"}')


# plugin args: a selector byte per line; % 7 picks 0 config, 1 ep, 2 dp, 3 precision,
# 4 set, 5 check, 6 split a --moe-set list; bit 7 set allows config paths
def sel(k, paths=False):
    return bytes([(0xB6 if paths else 0x38) + k])  # 0xB6 and 0x38 are both 0 mod 7


w('plugin_args/all', sel(0) + b'L0_sanity\n' + sel(1) + b'2\n' + sel(2) + b'4\n' + sel(3) + b'bf16\n' +
  sel(4) + b'train.steps=5,optimizer.betas=[0.9,0.95]\n' + sel(5) + b'\n')
w('plugin_args/path', sel(0, True) + b'/home/u/my.cfg\n' + sel(0) + b'/etc/passwd\n')
w('plugin_args/bad', sel(0) + b'../x\n' + sel(1) + b'0\n' + sel(2) + b'99999999\n' + sel(3) + b'fp4\n' +
  sel(4) + b'parallel.ep=2\n')
w('plugin_args/split', sel(6) + b'a=1,b="x,y",c=[1,2],d=\n' + sel(6) + b'noequals\n')

# plugstack.conf arguments
w('policy/full', 'trainer=/opt/moekit/bin/moe-train configs=/opt/moekit/configs on_non_blackwell=reject '
  'allow_user_configs=yes allow_cpu=yes allow_fp8_block=no topology_xml=/etc/moekit/node.xml bind=no')
w('policy/short', 'allow_cpu=yes')
w('policy/bad', 'allow_cpu=maybe trainer=relative/path frobnicate=1 word')
w('policy/duplicate', 'bind=yes bind=no')

# store_index: mode byte + index.bin of stores that build/bin/moe-data prepares
# (mode 0: checksums recomputed, 1: raw bytes, 2: tokens.bin one byte short)
import subprocess, tempfile
MOE_DATA = os.path.join(os.path.dirname(TESTS), 'build', 'bin', 'moe-data')
if os.path.exists(MOE_DATA):
    ROOT = os.path.dirname(TESTS)
    with tempfile.TemporaryDirectory() as tmp:
        def store(name, *inputs):
            subprocess.run([MOE_DATA, 'prepare', '--quiet', '--out', os.path.join(tmp, name)] +
                           list(inputs), cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
            return open(os.path.join(tmp, name, 'index.bin'), 'rb').read()
        lam = store('lam', 'data/lambda_virus.fa.gz')
        two = store('two', 'tests/data/fasta/mixed.fa.gz', 'data/lambda_virus.fa.gz')
        w('store_index/lambda', b'\x00' + lam)
        w('store_index/two_files', b'\x00' + two)
        w('store_index/two_files_raw', b'\x01' + two)
        w('store_index/short_tokens', b'\x02' + two)
        w('store_index/header_only', b'\x00' + two[:128])
