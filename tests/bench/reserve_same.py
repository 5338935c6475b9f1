#!/usr/bin/python3
# Whether two versions of the reserve script decide alike: the same calls
# (seeded, random: plain, split, tokens_rule max, expected output, tight
# limits that defer and shed, lanes and tenants with ceilings and daily
# tokens, group mode, malformed items, dry runs) against each version in a
# redis-server of its own, on a clock frozen and moved by the calls
# (test_clock_offset_ms "=<ms>"), and every reply and the whole keyspace
# at the end compared. For a change meant to change no behaviour, such as
# a speed-up (docs/benchmarks.md, issue 24).
#   tests/bench/reserve_same.py OLD_DIR NEW_DIR [seeds (5)]
# Each DIR holds common.lua, configure.lua and reserve.lua. Prints one line
# per seed and ALL IDENTICAL, or the first difference and DIFFERENT (exit 1).
# Needs redis-server and the redis module of Debian's python3 (/usr/bin/python3,
# where deploy/install-deps.sh installs python3-redis).
import sys, redis, subprocess, time, os, tempfile, random, shutil
def start():
    d = tempfile.mkdtemp(); sock = d + '/s'
    p = subprocess.Popen(['redis-server', '--port', '0', '--unixsocket', sock, '--save', '', '--appendonly', 'no'], stdout=subprocess.DEVNULL)
    for _ in range(100):
        if os.path.exists(sock): break
        time.sleep(0.05)
    r = redis.Redis(unix_socket_path=sock)
    for _ in range(100):
        try: r.ping(); break
        except Exception: time.sleep(0.05)
    return p, r, d
SUF = ['limits', 'state', 'grants', 'leases', 'refq:requests', 'refq:tokens', 'daily', 'retry', 'agents', 'refq:input', 'refq:output']
keys = lambda dep: ['sluice:{%s}:%s' % (dep, s) for s in SUF]
CFG = {
 'plain': ['rpm', '600', 'tpm', '60000', 'lease_ms', '600000'],
 'tight': ['rpm', '60', 'tpm', '6000', 'burst_requests', '3', 'burst_tokens', '300', 'horizon_ms', '2000', 'max_concurrency', '5', 'rpd', '40', 'tpd', '5000'],
 'split': ['rpm', '600', 'itpm', '30000', 'otpm', '8000', 'output_charge', 'expected'],
 'max': ['rpm', '600', 'tpm', '60000', 'tokens_rule', 'max'],
 'lt': ['rpm', '600', 'tpm', '60000', 'lane.interactive', '0,-1,0.2', 'lane.batch', '1,-1,0', 'tenant.a', '3,0,0,0', 'tenant.b', '1,0,0,0'],
 'lt2': ['rpm', '300', 'tpm', '30000', 'lane.interactive', '0,3000,0.5', 'lane.batch', '1,1000,0', 'tenant.a', '3,100,20000,50000', 'tenant.b', '1,50,10000,0'],
 'm1': ['rpm', '120', 'tpm', '12000'], 'm2': ['rpm', '60', 'tpm', '6000'], 'm3': ['rpm', '600', 'tpm', '60000'],
}
def run(d, seed):
    src = lambda f: open(d + '/common.lua').read() + open(d + '/' + f).read()
    p, r, tmp = start()
    log = []
    try:
        conf = r.script_load(src('configure.lua')); res = r.script_load(src('reserve.lua'))
        for dep, cfg in CFG.items():
            try: log.append(('cfg', dep, r.evalsha(conf, 11, *keys(dep), *cfg)))
            except Exception as e: log.append(('cfgerr', dep, str(e)))
            r.hset(keys(dep)[0], 'test_clock_offset_ms', '=1790000000000')
        rnd = random.Random(seed)
        toks = ['100', '1', '0', '60+40', '=100', '=60+40', '5000', '300+700', '99999999', 'x', '250']
        waits = ['60000', '0', '1000', '500', '120000']
        t = 1790000000000
        for step in range(400):
            t += rnd.choice([0, 1, 50, 300, 2000])
            for dep in CFG: r.hset(keys(dep)[0], 'test_clock_offset_ms', '=%d' % t)
            dep = rnd.choice(['plain', 'tight', 'split', 'max', 'lt', 'lt2', 'group'])
            n = rnd.choice([1, 2, 5, 17])
            tail = []
            if rnd.random() < 0.15: tail.append('@dry')
            if dep == 'group':
                argv = ['group', '3', rnd.choice(['0', '1000']), rnd.choice(['priority', 'weighted']), str(n)]
                for i in range(n):
                    argv += [rnd.choice(toks[:8]), rnd.choice(waits), rnd.choice(['', 'batch', 'interactive']), rnd.choice(['', 'a', 'b']), rnd.choice(['1,2,3', '2,3,1', '3', '3,1'])]
                ks = keys('m1') + keys('m2') + keys('m3')
            else:
                quad = dep.startswith('lt') or rnd.random() < 0.3
                argv = [str(n)]
                for i in range(n):
                    argv += [rnd.choice(toks if rnd.random() < 0.05 else toks[:8]), rnd.choice(waits)]
                    if quad: argv += [rnd.choice(['', 'batch', 'interactive', 'zz']), rnd.choice(['', 'a', 'b', 'c'])]
                ks = keys(dep)
            try: rep = r.evalsha(res, len(ks), *ks, *(argv + tail))
            except Exception as e: rep = 'ERR ' + str(e)
            log.append((step, dep, argv, tail, rep))
        snap = {}
        for k in sorted(r.keys('*')):
            ty = r.type(k)
            if ty == b'hash': v = sorted(r.hgetall(k).items())
            elif ty == b'zset': v = r.zrange(k, 0, -1, withscores=True)
            elif ty == b'list': v = r.lrange(k, 0, -1)
            else: v = r.dump(k)
            snap[k] = (ty, v)
        log.append(('snap', snap))
    finally:
        r.shutdown(nosave=True); p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return log
a, b = sys.argv[1], sys.argv[2]
bad = 0
for seed in range(int(sys.argv[3]) if len(sys.argv) > 3 else 5):
    la, lb = run(a, seed), run(b, seed)
    if la != lb:
        bad += 1
        for x, y in zip(la, lb):
            if x != y: print('seed', seed, 'DIFF\n  ', str(x)[:600], '\n  ', str(y)[:600]); break
    else:
        kinds = {}
        for e in la:
            if len(e) == 5 and isinstance(e[4], list):
                for v in (e[4][5:] if e[1] != 'group' else e[4][1:]):
                    if isinstance(v, list): kinds[v[0]] = kinds.get(v[0], 0) + 1
            elif len(e) == 5: kinds['err'] = kinds.get('err', 0) + 1
        print('seed', seed, 'identical', len(la), 'entries; verdict kinds', kinds, 'keys', len(la[-1][1]))
    if seed == 0:
        print('configured:', ', '.join(e[1] + ('' if e[0] == 'cfg' else ' (refused: %s)' % e[2]) for e in la if e[0] in ('cfg', 'cfgerr')))
print('DIFFERENT' if bad else 'ALL IDENTICAL')
sys.exit(1 if bad else 0)
