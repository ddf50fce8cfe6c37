"""DataLoader throughput, ember against torch: batches per second over a TensorDataset of
32x32 RGB images (float32) and int64 labels, for num_workers 0 and 2.

    python benchmarks/dataloader.py [--batches 200] [--batch-size 64]
"""
import argparse
import time


def bench(lib, num_workers, batches, batch_size):
    data = lib.utils.data
    n = batches * batch_size
    ds = data.TensorDataset(lib.rand(n, 3, 32, 32), lib.randint(0, 10, (n,)))
    loader = data.DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=num_workers,
                             persistent_workers=num_workers > 0)
    for _ in loader:                    # warm-up epoch (starts persistent workers)
        pass
    start = time.perf_counter()
    count = sum(1 for _ in loader)
    return count / (time.perf_counter() - start)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()
    import ember
    libs = [("ember", ember)]
    try:
        import torch
        torch.set_num_threads(1)
        libs.append(("torch", torch))
    except ImportError:
        pass
    for workers in (0, 2):
        row = [f"{name} {bench(lib, workers, args.batches, args.batch_size):8.0f} batches/s"
               for name, lib in libs]
        print(f"num_workers={workers}: " + "   ".join(row))


if __name__ == "__main__":
    main()
