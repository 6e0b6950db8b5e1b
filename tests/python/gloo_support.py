"""What the gloo tests of attnc.distributed share: a free port, W spawned
ranks whose worker reports failures through a queue, and one gloo process
group of one rank for the argument checks. Needs PyTorch; the tests that
import it skip without it."""

import socket

try:
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:
    dist = mp = None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(test, worker, world):
    """Spawns `world` processes of worker(rank, world, port, errors) and
    fails `test` with every message they put in errors."""
    errors = mp.get_context("spawn").Queue()
    mp.start_processes(worker, args=(world, free_port(), errors),
                       nprocs=world, start_method="spawn")
    found = []
    while not errors.empty():
        found.append(errors.get())
    test.assertEqual(found, [])


class OneRankGroup:
    """Mixed into a TestCase whose tests run inside a gloo group of one
    rank."""

    @classmethod
    def setUpClass(cls):
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0,
                                world_size=1)

    @classmethod
    def tearDownClass(cls):
        dist.destroy_process_group()
