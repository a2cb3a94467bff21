"""Fluid 1.8's parameter-server ``fleet``, as one local process.

``from paddle.fluid.incubate.fleet.parameter_server.distribute_transpiler import fleet`` gives
Fluid's transpiler fleet: ``fleet.init(role_maker)``, ``fleet.distributed_optimizer(opt,
strategy).minimize(loss)``, then per role ``init_server``/``run_server`` or
``init_worker``, training on ``fleet.main_program`` / ``fleet.startup_program``, and
``stop_worker``. In Fluid the transpiler splits the program: the trainers compute gradients and
send them to parameter-server processes, which hold the parameters and apply the optimizer.

fluidjax runs no parameter server. Its fleet is **one trainer process that holds its
parameters**: ``minimize`` is the wrapped optimizer's own (backward and optimizer ops in the
trainer's program), ``main_program`` / ``startup_program`` are that program and its startup
program, and ``init_worker`` / ``stop_worker`` have nothing to connect or flush. With one
trainer this computes what Fluid's synchronous mode computes (each step's gradient is applied
before the next step); Fluid's asynchronous mode, with one trainer, differs only by the
communicator's merging of late gradients. The server endpoints a role maker reads are recorded
(``server_num``, ``server_endpoints``), and:

- more than one trainer is refused at ``fleet.init`` (:class:`~fluidjax.NotOfferedError`): each
  process would train alone and silently diverge from Fluid's shared parameters; scale with
  ``fluid.CompiledProgram(...).with_data_parallel`` / ``fluidjax.distributed`` instead;
- a SERVER role is reported (``is_server()``), but ``init_server`` / ``run_server`` are refused:
  there is nothing to serve — start only the trainer.

Role makers: :class:`PaddleCloudRoleMaker` (Fluid's environment variables ``TRAINING_ROLE``,
``PADDLE_TRAINERS_NUM``, ``PADDLE_TRAINER_ID``, ``PADDLE_PSERVERS_IP_PORT_LIST``, and for a server
``POD_IP`` / ``PADDLE_PORT``) and :class:`UserDefinedRoleMaker`. ``DistributeTranspilerConfig``
is Fluid's configuration record (accepted as the strategy; its settings change nothing here).
"""

from __future__ import annotations

import os
from typing import Sequence

from ..ir.errors import FluidJaxError, NotOfferedError
from ..ir.program import Program, default_main_program, default_startup_program
from .io import save_inference_model, save_persistables

__all__ = ["Role", "RoleMakerBase", "UserDefinedRoleMaker", "PaddleCloudRoleMaker", "MPISymetricRoleMaker",
           "GeneralRoleMaker", "DistributeTranspilerConfig", "Fleet", "DistributedTranspiler",
           "DistributedOptimizer", "TranspilerOptimizer", "fleet", "FleetRoleError", "Mode"]


class FleetRoleError(FluidJaxError, ValueError):
    """A role maker's settings are missing or inconsistent (Fluid raises ValueError / KeyError)."""


class Role:
    """Fluid's roles: ``WORKER`` (a trainer), ``SERVER`` (a parameter server)."""
    WORKER = 1
    SERVER = 2
    XPU = 3


class Mode:
    """Fluid's fleet modes."""
    TRANSPILER = 1
    PSLIB = 2
    COLLECTIVE = 3


class RoleMakerBase:
    """A role: which process this is (worker or server, its index) and who the others are."""

    def __init__(self) -> None:
        self._role = None
        self._current_id = -1
        self._worker_endpoints: list[str] = []
        self._server_endpoints: list[str] = []
        self._worker_num = 0
        self._role_is_generated = False

    def generate_role(self) -> None:
        """Fill the role from the maker's source (environment, arguments)."""
        self._role_is_generated = True

    def is_worker(self) -> bool:
        """Whether this process is a trainer."""
        return self._role == Role.WORKER

    def is_server(self) -> bool:
        """Whether this process is a parameter server."""
        return self._role == Role.SERVER

    def is_first_worker(self) -> bool:
        """Whether this is trainer 0."""
        return self.is_worker() and self._current_id == 0

    def worker_index(self) -> int:
        """This trainer's index."""
        return self._current_id

    def server_index(self) -> int:
        """This server's index."""
        return self._current_id

    def worker_num(self) -> int:
        """How many trainers the job has."""
        return self._worker_num

    def server_num(self) -> int:
        """How many parameter servers the job lists."""
        return len(self._server_endpoints)

    def get_trainer_endpoints(self) -> list[str]:
        """The trainers' endpoints (when the maker knows them)."""
        return list(self._worker_endpoints)

    def get_pserver_endpoints(self) -> list[str]:
        """The parameter servers' endpoints."""
        return list(self._server_endpoints)


class UserDefinedRoleMaker(RoleMakerBase):
    """A role given in the script: ``UserDefinedRoleMaker(current_id=0, role=Role.WORKER,
    worker_num=1, server_endpoints=["127.0.0.1:6000"])``."""

    def __init__(self, current_id: int = 0, role: int = Role.WORKER, worker_num: int = 0,
                 server_endpoints: Sequence[str] | None = None) -> None:
        super().__init__()
        if role not in (Role.WORKER, Role.SERVER):
            raise FleetRoleError(f"UserDefinedRoleMaker: role must be Role.WORKER or Role.SERVER, got {role!r}")
        if not isinstance(current_id, int) or current_id < 0:
            raise FleetRoleError(f"UserDefinedRoleMaker: current_id must be an int >= 0, got {current_id!r}")
        if not isinstance(worker_num, int) or worker_num < 0:
            raise FleetRoleError(f"UserDefinedRoleMaker: worker_num must be an int >= 0, got {worker_num!r}")
        self._current_id = current_id
        self._role = role
        self._worker_num = worker_num
        self._server_endpoints = list(server_endpoints or [])

    def generate_role(self) -> None:
        """The role is the arguments'."""
        self._role_is_generated = True


class PaddleCloudRoleMaker(RoleMakerBase):
    """The role from Fluid's environment variables (what PaddleCloud and ``local_cluster.sh`` set):
    ``TRAINING_ROLE`` (``TRAINER`` / ``PSERVER``), ``PADDLE_TRAINERS_NUM``, ``PADDLE_TRAINER_ID``,
    ``PADDLE_PSERVERS_IP_PORT_LIST`` (``ip:port,...``), and for a server ``POD_IP`` and ``PADDLE_PORT``.
    ``is_collective=True`` (Fluid's collective fleet) is not offered."""

    def __init__(self, is_collective: bool = False, **kwargs) -> None:
        super().__init__()
        if is_collective:
            raise NotOfferedError("PaddleCloudRoleMaker(is_collective=True): Fluid's collective fleet is not offered "
                                  "by fluidjax; data-parallel training is fluid.CompiledProgram(main)"
                                  ".with_data_parallel(...) / fluidjax.distributed (docs/scaling.md)")
        self._is_collective = False

    def generate_role(self) -> None:
        """Read the role from the environment (a missing or bad variable is a FleetRoleError)."""
        if self._role_is_generated:
            return
        env = os.environ
        missing = [k for k in ("PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_TRAINERS_NUM", "TRAINING_ROLE") if k not in env]
        if missing:
            raise FleetRoleError(f"PaddleCloudRoleMaker: the environment lacks {', '.join(missing)} (Fluid's "
                                 "parameter-server job variables; for one local trainer: TRAINING_ROLE=TRAINER "
                                 "PADDLE_TRAINERS_NUM=1 PADDLE_TRAINER_ID=0 PADDLE_PSERVERS_IP_PORT_LIST=127.0.0.1:6000)")
        endpoints = [e for e in env["PADDLE_PSERVERS_IP_PORT_LIST"].split(",") if e]
        try:
            trainers = int(env["PADDLE_TRAINERS_NUM"])
        except ValueError:
            raise FleetRoleError(f"PaddleCloudRoleMaker: PADDLE_TRAINERS_NUM={env['PADDLE_TRAINERS_NUM']!r} is not "
                                 "an integer") from None
        role = env["TRAINING_ROLE"]
        if role == "TRAINER":
            try:
                current = int(env.get("PADDLE_TRAINER_ID", ""))
            except ValueError:
                raise FleetRoleError("PaddleCloudRoleMaker: a TRAINER needs PADDLE_TRAINER_ID (an integer)") from None
            self._role = Role.WORKER
        elif role == "PSERVER":
            endpoint = f"{env.get('POD_IP', '')}:{env.get('PADDLE_PORT', '')}"
            if endpoint not in endpoints:
                raise FleetRoleError(f"PaddleCloudRoleMaker: this PSERVER's endpoint {endpoint!r} (POD_IP:PADDLE_PORT) "
                                     f"is not in PADDLE_PSERVERS_IP_PORT_LIST {endpoints}")
            current = endpoints.index(endpoint)
            self._role = Role.SERVER
        else:
            raise FleetRoleError(f"PaddleCloudRoleMaker: TRAINING_ROLE must be PSERVER or TRAINER, got {role!r}")
        self._current_id = current
        self._worker_num = trainers
        self._server_endpoints = endpoints
        self._role_is_generated = True


def _refused_maker(name: str, why: str):
    class Refused(RoleMakerBase):
        def __init__(self, *args, **kwargs):
            raise NotOfferedError(f"{name} is not offered by fluidjax: {why}")
    Refused.__name__ = Refused.__qualname__ = name
    Refused.__doc__ = f"Not offered by fluidjax: {why}"
    return Refused


MPISymetricRoleMaker = _refused_maker("MPISymetricRoleMaker", "fluidjax's fleet is one local trainer (no MPI job)")
GeneralRoleMaker = _refused_maker("GeneralRoleMaker", "fluidjax's fleet is one local trainer (no Gloo / HTTP store)")


class DistributeTranspilerConfig:
    """Fluid's transpiler configuration record (``strategy.sync_mode = False`` and so on); the
    local fleet accepts it as a strategy and its settings change nothing (no program is split)."""

    def __init__(self) -> None:
        self.slice_var_up = True
        self.split_method = None
        self.min_block_size = 8192
        self.enable_dc_asgd = False
        self.mode = "pserver"
        self.print_log = False
        self.wait_port = True
        self.sync_mode = True
        self.runtime_split_send_recv = False
        self.geo_sgd_mode = False
        self.geo_sgd_need_push_nums = 100
        self.nccl_comm_num = 1
        self.use_hierarchical_allreduce = False
        self.hierarchical_allreduce_inter_nranks = 0
        self.collective_mode = None
        self.completely_not_async = False


class DistributedOptimizer:
    """Wraps an optimizer for a fleet: ``minimize`` builds the trainer's program."""

    def __init__(self, optimizer, strategy=None) -> None:
        self._optimizer = optimizer
        self._strategy = strategy

    def backward(self, loss, startup_program=None, parameter_list=None, no_grad_set=None, callbacks=None):
        """The wrapped optimizer's ``backward``."""
        return self._optimizer.backward(loss, startup_program, parameter_list, no_grad_set)

    def apply_gradients(self, params_grads):
        """The wrapped optimizer's ``apply_gradients``."""
        return self._optimizer.apply_gradients(params_grads)


class TranspilerOptimizer(DistributedOptimizer):
    """``fleet.distributed_optimizer(optimizer, strategy)``: ``minimize`` is the optimizer's own
    (the one trainer holds and updates its parameters) and records the programs on the fleet."""

    def __init__(self, optimizer, strategy=None, fleet_=None) -> None:
        super().__init__(optimizer, strategy)
        self._fleet = fleet_ if fleet_ is not None else fleet

    def minimize(self, loss, scope=None, startup_program: Program | None = None, parameter_list=None,
                 no_grad_set=None):
        """Append backward and optimizer ops to ``loss``'s program (as ``optimizer.minimize``);
        ``fleet.main_program`` / ``fleet.startup_program`` become that program and its startup."""
        if isinstance(loss, (list, tuple)):
            if len(loss) != 1:
                raise NotOfferedError("TranspilerOptimizer.minimize: several losses (one per program) are not "
                                      "offered; pass one loss")
            loss = loss[0]
        startup = startup_program if startup_program is not None else default_startup_program()
        result = self._optimizer.minimize(loss, startup, parameter_list, no_grad_set)
        self._fleet._set_programs(loss.block.program, startup)
        return result


class Fleet:
    """One local trainer (see the module docstring): the role, the programs, and save helpers."""

    def __init__(self, mode: int = Mode.TRANSPILER) -> None:
        self._mode = mode
        self._role_maker: RoleMakerBase | None = None
        self._optimizer = None
        self.main_program: Program | None = None
        self.startup_program: Program | None = None
        self._origin_main_program: Program | None = None
        self._origin_startup_program: Program | None = None

    # -- role -------------------------------------------------------------------------------------
    def init(self, role_maker: RoleMakerBase | None = None) -> None:
        """Take ``role_maker``'s role (Fluid's default maker is MPI's, not offered: pass one).
        More than one trainer is refused (each would train alone)."""
        if role_maker is None:
            raise NotOfferedError("fleet.init() without a role maker uses Fluid's MPISymetricRoleMaker, which "
                                  "fluidjax does not offer; pass role_maker.PaddleCloudRoleMaker() or "
                                  "UserDefinedRoleMaker(...)")
        if not isinstance(role_maker, RoleMakerBase):
            raise TypeError(f"fleet.init: role_maker must be a RoleMakerBase, got {type(role_maker).__name__}")
        role_maker.generate_role()
        if role_maker.worker_num() > 1:
            raise NotOfferedError(f"fleet.init: the job has {role_maker.worker_num()} trainers; fluidjax's "
                                  "parameter-server fleet is one local trainer that holds its parameters (several "
                                  "would each train alone). Run one trainer, or scale with fluid.CompiledProgram"
                                  "(main).with_data_parallel(...) / fluidjax.distributed (docs/scaling.md)")
        self._role_maker = role_maker

    def _role(self) -> RoleMakerBase:
        if self._role_maker is None:
            raise FleetRoleError("fleet: call fleet.init(role_maker) first")
        return self._role_maker

    def is_worker(self) -> bool:
        """Whether this process is a trainer."""
        return self._role().is_worker()

    def is_server(self) -> bool:
        """Whether this process is a parameter server (whose init/run are refused)."""
        return self._role().is_server()

    def is_first_worker(self) -> bool:
        """Whether this is trainer 0."""
        return self._role().is_first_worker()

    def worker_index(self) -> int:
        """This trainer's index (0)."""
        return self._role().worker_index()

    def server_index(self) -> int:
        """This server's index."""
        return self._role().server_index()

    def worker_num(self) -> int:
        """The number of trainers (1, or 0 when the maker leaves it unsaid)."""
        return self._role().worker_num()

    def server_num(self) -> int:
        """The number of parameter servers the role lists (none runs)."""
        return self._role().server_num()

    def worker_endpoints(self, to_string: bool = False):
        """The trainers' endpoints."""
        eps = self._role().get_trainer_endpoints()
        return ",".join(eps) if to_string else eps

    def server_endpoints(self, to_string: bool = False):
        """The parameter servers' endpoints, as the role lists them."""
        eps = self._role().get_pserver_endpoints()
        return ",".join(eps) if to_string else eps

    def split_files(self, files: Sequence[str]) -> list[str]:
        """This trainer's share of ``files`` (Fluid's contiguous split by trainer index): with one
        trainer, all of them."""
        files = list(files)
        n = max(1, self.worker_num())
        index = max(0, self.worker_index())
        size, extra = divmod(len(files), n)
        start = index * size + min(index, extra)
        return files[start: start + size + (1 if index < extra else 0)]

    # -- worker / server --------------------------------------------------------------------------
    def init_worker(self) -> None:
        """Nothing to connect: the trainer holds its parameters."""
        self._role()

    def stop_worker(self) -> None:
        """Nothing to flush or stop."""
        self._role()

    def init_server(self, model_dir: str | None = None) -> None:
        """Refused: no parameter server runs in fluidjax's fleet."""
        raise NotOfferedError("fleet.init_server: fluidjax's fleet runs no parameter server (its one trainer holds "
                              "and updates the parameters); start only the TRAINER process")

    def run_server(self) -> None:
        """Refused, as ``init_server``."""
        raise NotOfferedError("fleet.run_server: fluidjax's fleet runs no parameter server (its one trainer holds "
                              "and updates the parameters); start only the TRAINER process")

    def barrier_worker(self) -> None:
        """One trainer: nothing to wait for."""

    # -- programs ---------------------------------------------------------------------------------
    def distributed_optimizer(self, optimizer, strategy=None) -> TranspilerOptimizer:
        """Wrap ``optimizer``: its ``minimize`` builds the trainer's program (see the module)."""
        self._optimizer = TranspilerOptimizer(optimizer, strategy, self)
        return self._optimizer

    def _set_programs(self, main: Program, startup: Program) -> None:
        self.main_program = self._origin_main_program = main
        self.startup_program = self._origin_startup_program = startup

    def _main(self, main_program):
        if main_program is not None:
            return main_program
        return self.main_program if self.main_program is not None else default_main_program()

    def save_persistables(self, executor, dirname: str, main_program: Program | None = None, **kwargs) -> None:
        """``fluid.io.save_persistables`` of the trainer's program (default ``main_program``)."""
        save_persistables(executor, dirname, self._main(main_program), **kwargs)

    def save_inference_model(self, executor, dirname: str, feeded_var_names, target_vars,
                             main_program: Program | None = None, export_for_deployment: bool = True) -> None:
        """``fluid.io.save_inference_model`` of the trainer's program (default ``main_program``)."""
        save_inference_model(dirname, feeded_var_names, target_vars, executor, self._main(main_program),
                             export_for_deployment=export_for_deployment)


class DistributedTranspiler(Fleet):
    """Fluid's transpiler fleet class; ``fleet`` is its one instance."""


fleet = DistributedTranspiler()
