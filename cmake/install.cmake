# install.cmake: where `cmake --install` puts every file, in the FHS places a Slurm site
# expects, and so what each Debian package holds (debian/*.install lists the same paths).
#
#   <sbindir>   gpupoold, gpupool-agentd, gpupool-capacity-publisher (daemons, as Slurm's)
#   <bindir>    gpupoolctl (a user command, as scontrol)
#   GPUPOOL_SLURM_PLUGIN_DIR   spank_gpupool.so, gres_gpupool.so: Slurm loads plugins only
#               from its PluginDir, so they go there whatever the prefix
#   <libdir>/gpupool           the remoting libcuda.so.1, its UCX module, the NVML library
#               (libnvidia-ml.so.1, remote/nvml) and the NVRTC shim (libnvrtc.so.N, remote/nvrtc), alone in a directory of their own: a job's LD_LIBRARY_PATH gets exactly this directory,
#               and the system's libcuda.so.1 is never replaced
#   <sysconfdir>/gpupool       gpupool.conf, profiles/*.profile
#   <sysconfdir>/slurm/plugstack.conf.d/gpupool.conf   the plugin's plugstack line
#   GPUPOOL_SYSTEMD_UNIT_DIR   gpupoold.service, gpupool-agentd.service
#   <datadir>/gpupool/examples job_submit.lua, slurm.conf and gres.conf fragments
#   <mandir>    every man page of man/
# Files that name an installed path (units, the plugstack line) are written from templates
# (*.in) with these paths, so the installed copy always names the installed files.
# Included by the top-level CMakeLists.txt after every component, so every target exists.
include(GNUInstallDirs)

# Slurm's plugin directory: next to libslurm (Debian: <multiarch libdir>/slurm-wlm; the
# upstream default: <libdir>/slurm). libslurm ships no pkg-config file to ask.
get_filename_component(gpupool_slurm_libdir ${SLURM_LIBRARY} DIRECTORY)
set(gpupool_slurm_plugin_dir_default "")
foreach(candidate slurm-wlm slurm)
  if(EXISTS ${gpupool_slurm_libdir}/${candidate}/select_cons_tres.so)
    set(gpupool_slurm_plugin_dir_default ${gpupool_slurm_libdir}/${candidate})
    break()
  endif()
endforeach()
set(GPUPOOL_SLURM_PLUGIN_DIR "${gpupool_slurm_plugin_dir_default}" CACHE PATH
    "Slurm's PluginDir, where spank_gpupool.so and gres_gpupool.so are installed")
if(NOT GPUPOOL_SLURM_PLUGIN_DIR)
  message(FATAL_ERROR "cannot find Slurm's plugin directory (no select_cons_tres.so in "
          "${gpupool_slurm_libdir}/slurm-wlm or ${gpupool_slurm_libdir}/slurm): "
          "set -DGPUPOOL_SLURM_PLUGIN_DIR=<Slurm's PluginDir>")
endif()

# systemd's unit directory (Debian bookworm: /lib/systemd/system), from systemd.pc when
# the prefix is /usr; under another prefix, <prefix>/lib/systemd/system.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  pkg_get_variable(gpupool_unit_dir_default systemd systemdsystemunitdir)
endif()
if(NOT gpupool_unit_dir_default)
  set(gpupool_unit_dir_default ${CMAKE_INSTALL_PREFIX}/lib/systemd/system)
endif()
set(GPUPOOL_SYSTEMD_UNIT_DIR "${gpupool_unit_dir_default}" CACHE PATH
    "Where gpupoold.service and gpupool-agentd.service are installed")

# The absolute paths the templates name (GNUInstallDirs maps the prefix /usr to /etc).
set(GPUPOOL_INSTALL_SLURM_PLUGIN_DIR ${GPUPOOL_SLURM_PLUGIN_DIR})
set(GPUPOOL_INSTALL_SYSTEMD_UNIT_DIR ${GPUPOOL_SYSTEMD_UNIT_DIR})
set(GPUPOOL_INSTALL_CONF_DIR ${CMAKE_INSTALL_FULL_SYSCONFDIR}/gpupool)
set(GPUPOOL_INSTALL_PROFILE_DIR ${GPUPOOL_INSTALL_CONF_DIR}/profiles)
set(GPUPOOL_INSTALL_REMOTING_DIR ${CMAKE_INSTALL_FULL_LIBDIR}/gpupool)
set(GPUPOOL_INSTALL_PLUGSTACK_DIR ${CMAKE_INSTALL_FULL_SYSCONFDIR}/slurm/plugstack.conf.d)
set(GPUPOOL_INSTALL_EXAMPLES_DIR ${CMAKE_INSTALL_FULL_DATADIR}/gpupool/examples)

set(gpupool_generated ${CMAKE_BINARY_DIR}/install-files)
foreach(unit gpupoold gpupool-agentd)
  configure_file(${CMAKE_SOURCE_DIR}/etc/${unit}.service.in
                 ${gpupool_generated}/${unit}.service @ONLY)
endforeach()
configure_file(${CMAKE_SOURCE_DIR}/etc/plugstack.conf.d/gpupool.conf.in
               ${gpupool_generated}/plugstack.conf.d/gpupool.conf @ONLY)

# Programs.
install(TARGETS gpupoold gpupool-agentd RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR})
# The agent's session worker: started by gpupool-agentd only, so not on PATH.
install(TARGETS gpupool-worker RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/gpupool)
install(TARGETS gpupoolctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS ${CMAKE_SOURCE_DIR}/scripts/capacity-publisher
        DESTINATION ${CMAKE_INSTALL_SBINDIR} RENAME gpupool-capacity-publisher)

# Slurm plugins.
install(TARGETS spank_gpupool gres_gpupool LIBRARY DESTINATION ${GPUPOOL_SLURM_PLUGIN_DIR})
install(FILES ${gpupool_generated}/plugstack.conf.d/gpupool.conf
        DESTINATION ${GPUPOOL_INSTALL_PLUGSTACK_DIR})
install(FILES ${CMAKE_SOURCE_DIR}/etc/job_submit.lua
              ${CMAKE_SOURCE_DIR}/etc/slurm.conf.example
              ${CMAKE_SOURCE_DIR}/etc/gres.conf.example
        DESTINATION ${GPUPOOL_INSTALL_EXAMPLES_DIR})

# The remoting library: libcuda.so.1 only (no libcuda.so link: nothing links against it,
# jobs load it by its soname) and the transport module it dlopens from its own directory.
if(GPUPOOL_BUILD_CUDA)
  install(TARGETS gpupool_cuda LIBRARY DESTINATION ${GPUPOOL_INSTALL_REMOTING_DIR}
          NAMELINK_SKIP)
endif()
install(TARGETS gpupool_ucx_client LIBRARY DESTINATION ${GPUPOOL_INSTALL_REMOTING_DIR})
# The replacement libnvidia-ml.so.1 (remote/nvml), by its soname only, beside libcuda.so.1:
# the job's NVML (nvidia-smi, pynvml) then sees its pool GPUs.
if(TARGET gpupool_nvml)
  install(TARGETS gpupool_nvml LIBRARY DESTINATION ${GPUPOOL_INSTALL_REMOTING_DIR}
          NAMELINK_SKIP)
endif()
# The NVRTC shim (remote/nvrtc), by its soname only, where the toolkit has NVRTC.
if(TARGET gpupool_nvrtc)
  install(TARGETS gpupool_nvrtc LIBRARY DESTINATION ${GPUPOOL_INSTALL_REMOTING_DIR}
          NAMELINK_SKIP)
endif()

# Configuration.
install(FILES ${CMAKE_SOURCE_DIR}/etc/gpupool.conf DESTINATION ${GPUPOOL_INSTALL_CONF_DIR})
file(GLOB gpupool_profiles ${CMAKE_SOURCE_DIR}/etc/profiles/*.profile)
install(FILES ${gpupool_profiles} DESTINATION ${GPUPOOL_INSTALL_PROFILE_DIR})
install(FILES ${gpupool_generated}/gpupoold.service ${gpupool_generated}/gpupool-agentd.service
        DESTINATION ${GPUPOOL_SYSTEMD_UNIT_DIR})

# Man pages, each into the section its name ends with.
file(GLOB gpupool_man_pages ${CMAKE_SOURCE_DIR}/man/*.[1-8])
foreach(page ${gpupool_man_pages})
  string(REGEX MATCH "[1-8]$" section ${page})
  install(FILES ${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
endforeach()
