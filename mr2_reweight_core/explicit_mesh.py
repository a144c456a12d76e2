"""Where per-class results live when the batch is laid out over Explicit mesh axes.

`jax.jit` of arrays placed with `NamedSharding` on a mesh of `jax.make_mesh`'s default axis type
(`AxisType.Explicit`) types every value with its sharding, and refuses at trace time an op whose
result sharding it cannot infer: the scatter that sums batch-sharded rows into per-class slots, a
gather of per-class values at batch-sharded labels, a sort of sharded labels. The functions of both
libraries then see the global batch (no `axis_name`), so they say where each such result lives:

* a per-class reduction (sums, counts, minima over the rows of a class) is replicated
  (`replicated`): XLA reduces each device's rows, then all-reduces the per-class partial results,
  the `psum` of the `axis_name` path; rows are never all-gathered for it;
* a per-row read of a per-class table is laid out like the rows (`take`);
* where every device needs the whole batch (pairs of rows and the class-sorted batch of ℓ_s̄ and
  SupCon, the labels that `jnp.unique` compacts when K > B, LfF's positions), it is all-gathered
  once (`gathered`), as `all_gather` does under `axis_name`.

Anywhere else (one device, `pmap`, the Manual axes inside `shard_map`, Auto meshes) every function
here is the plain op, so those results are bit for bit what they were.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import AbstractMesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec
from jax.typing import ArrayLike


def _explicit_mesh(x: ArrayLike) -> AbstractMesh | None:
  """The mesh `x` is typed on when it has Explicit axes, else None."""
  mesh = jax.typeof(x).sharding.mesh
  return mesh if mesh.explicit_axes else None


def rows_split(x: ArrayLike) -> bool:
  """True when the rows of `x` (its first axis) are split over Explicit mesh axes."""
  spec = jax.typeof(x).sharding.spec
  return _explicit_mesh(x) is not None and len(spec) > 0 and spec[0] is not None


def replicated(x: ArrayLike) -> NamedSharding | None:
  """The `out_sharding` of a per-class result of the batch `x`: replicated on x's mesh when that
  mesh has Explicit axes; None (the op's own default) otherwise."""
  mesh = _explicit_mesh(x)
  return None if mesh is None else NamedSharding(mesh, PartitionSpec())


def replicated_out(x: ArrayLike) -> dict[str, Any]:
  """`out_sharding=replicated(x)` as keyword arguments for an op, and no keyword when there is no
  Explicit mesh, so that the plain op also runs on JAX releases whose op takes no `out_sharding`
  (`jax.ops.segment_sum` gained it in JAX 0.10.2)."""
  sharding = replicated(x)
  return {} if sharding is None else {"out_sharding": sharding}


def row_sharding(x: ArrayLike) -> NamedSharding | None:
  """The `out_sharding` of a per-row result of `x`: its first axis laid out as x's, any other axis
  replicated, when x's mesh has Explicit axes; None otherwise."""
  mesh = _explicit_mesh(x)
  if mesh is None:
    return None
  spec = jax.typeof(x).sharding.spec
  return NamedSharding(mesh, PartitionSpec(spec[0] if len(spec) else None))


def gathered(x: jax.Array) -> jax.Array:
  """`x` replicated on every device of its Explicit mesh (an all-gather of its rows; the
  transpose hands each device its rows' cotangents); `x` itself otherwise."""
  sharding = replicated(x)
  return x if sharding is None else jax.sharding.reshard(x, sharding)


def take(table: jax.Array, index: jax.Array) -> jax.Array:
  """table[index] (a gather along the table's first axis), laid out like `index` under Explicit
  axes: per-class or per-slot values read at each row's class stay with the rows."""
  sharding = row_sharding(index)
  if sharding is None:
    return table[index]
  return table.at[index].get(out_sharding=sharding)


def laid_out_like(x: jax.Array, rows: jax.Array) -> jax.Array:
  """`x` (a value per row, computed replicated) laid out like `rows` under Explicit axes: each
  device keeps its own rows (a slice, no communication); `x` itself otherwise."""
  if _explicit_mesh(rows) is None:
    return x
  return jax.sharding.reshard(x, jax.typeof(rows).sharding)
