# tests/bad_shards.py: writes the llm.c shards that tests/t_bad_inputs.sh feeds to train_gpt_cpu: good.bin
# (1000 uint16 tokens i % 200 under a 256-int32 header: magic 20240520, version 1, token count) and damaged
# copies: magic.bin (magic 12345), trunc.bin (10 bytes cut), version.bin (version 7), short.bin (100 bytes,
# less than a header). Called as: python3 tests/bad_shards.py DIR
import struct, sys
d = sys.argv[1]
def shard(path, magic=20240520, version=1, ntok=1000, cut=0):
    hdr = [0] * 256; hdr[0] = magic; hdr[1] = version; hdr[2] = ntok
    body = struct.pack('<%dH' % ntok, *[i % 200 for i in range(ntok)])
    data = struct.pack('<256i', *hdr) + body
    open(path, 'wb').write(data[:len(data) - cut])
shard(d + '/good.bin')
shard(d + '/magic.bin', magic=12345)
shard(d + '/trunc.bin', cut=10)
shard(d + '/version.bin', version=7)
open(d + '/short.bin', 'wb').write(b'\x00' * 100)
