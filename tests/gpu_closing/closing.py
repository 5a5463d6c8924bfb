import os, torch  # noqa: E401, I001 (as recorded: the traces name its lines)
from torch.profiler import profile, schedule, tensorboard_trace_handler, ProfilerActivity as A
m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()  # noqa: E501
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.randn(512, 1024, device="cuda")
def step():
    loss = m(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()
for _ in range(5):
    step()
torch.cuda.synchronize()
for stack in (True, False):
    d = os.path.join(os.environ["OUT"], "closing_" + ("stack" if stack else "nostack"))
    with profile(activities=[A.CPU, A.CUDA], schedule=schedule(wait=0, warmup=0, active=3),
                 on_trace_ready=tensorboard_trace_handler(d, use_gzip=True), with_stack=stack) as p:
        for _ in range(3):
            step()
            p.step()
print(torch.__version__, torch.cuda.get_device_name())
