"""Adapters that bring other simulators behind the jaxrl environment contract.

* :mod:`jaxrl.adapters.brax` — every Brax environment as ``brax/<name>`` (needs the
  ``[physics]`` extra).
* :mod:`jaxrl.adapters.playground` — MuJoCo Playground's DM Control Suite as
  ``playground/<Name>`` (needs the ``[playground]`` extra).
* :mod:`jaxrl.adapters.mjx` — a physics env from a MuJoCo XML model plus pure
  ``observation`` / ``reward`` / ``terminated`` functions, stepped by ``mujoco-mjx``.

No module imports its simulator at ``import jaxrl`` time.
"""
