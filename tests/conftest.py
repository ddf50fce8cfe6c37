import pytest


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run slow tests")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="slow: run with --runslow (make test-all)")
    # (markers, not keywords: a parameter id such as "cuda" in test_x[cuda] is a keyword too)
    for item in items:
        if item.get_closest_marker("slow") and not config.getoption("--runslow"):
            item.add_marker(skip)
    try:
        import cupy  # noqa: F401
        has_gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        has_gpu = False
    if not has_gpu:
        skip_cuda = pytest.mark.skip(reason="needs a CUDA GPU with CuPy")
        for item in items:
            if item.get_closest_marker("cuda"):
                item.add_marker(skip_cuda)


@pytest.fixture(params=[1, 2], ids=lambda n: f"threads{n}")
def threads(request):
    """Run the test at 1 and at 2 threads (kernels split rows over ``ember.get_num_threads()``);
    the value is the thread count."""
    import ember
    before = ember.get_num_threads()
    ember.set_num_threads(request.param)
    yield request.param
    ember.set_num_threads(before)
