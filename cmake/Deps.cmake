# All dependencies come from Debian 12 packages:
#   libev-dev liblua5.4-dev libck-dev libhiredis-dev libsodium-dev libxxhash-dev libcmocka-dev
#   libedit-dev (console line editing) libmicrohttpd-dev (web server) libcjson-dev (JSON)
#   libsystemd-dev (sd_notify) libssl-dev (OpenSSL 3: DNS over TLS and HTTPS)
#   libnghttp2-dev (HTTP/2 for DNS over HTTPS)
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

# Lua's pkg-config name differs between distributions.
foreach(name lua5.4 lua-5.4 lua54)
  pkg_check_modules(LUA54 IMPORTED_TARGET ${name})
  if(LUA54_FOUND)
    break()
  endif()
endforeach()
if(NOT LUA54_FOUND)
  message(FATAL_ERROR "Lua 5.4 not found (apt-get install liblua5.4-dev)")
endif()

pkg_check_modules(CK REQUIRED IMPORTED_TARGET ck)
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(EDIT REQUIRED IMPORTED_TARGET libedit)
pkg_check_modules(MHD REQUIRED IMPORTED_TARGET libmicrohttpd)
pkg_check_modules(CJSON REQUIRED IMPORTED_TARGET libcjson)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)   # sd_notify (dnslb/core/notify.c)
pkg_check_modules(OPENSSL REQUIRED IMPORTED_TARGET libssl libcrypto)   # TLS contexts (dnslb/core/tls.c)
pkg_check_modules(NGHTTP2 REQUIRED IMPORTED_TARGET libnghttp2)   # HTTP/2 for DoH (dnslb/frontend/doh_h2.c)

# libev ships no pkg-config file on Debian.
find_path(LIBEV_INCLUDE_DIR ev.h REQUIRED)
find_library(LIBEV_LIBRARY ev REQUIRED)

add_library(dlb_deps INTERFACE)
target_include_directories(dlb_deps INTERFACE ${LIBEV_INCLUDE_DIR})
target_link_libraries(dlb_deps INTERFACE ${LIBEV_LIBRARY} PkgConfig::LUA54 PkgConfig::CK
                      PkgConfig::SODIUM PkgConfig::XXHASH PkgConfig::EDIT PkgConfig::MHD
                      PkgConfig::CJSON PkgConfig::HIREDIS PkgConfig::SYSTEMD PkgConfig::OPENSSL PkgConfig::NGHTTP2
                      Threads::Threads m)
