# The C library, installable: `make install PREFIX=/usr/local` (DESTDIR for staging).
#
#   $(LIBDIR)/libchassis.so.$(ABI).$(VERSION)  the shared library, SONAME libchassis.so.$(ABI)
#   $(LIBDIR)/libchassis.so.$(ABI), libchassis.so   links to it
#   $(LIBDIR)/libchassis.a                     the static library
#   $(INCLUDEDIR)/chassis.h                    the header
#   $(LIBDIR)/pkgconfig/chassis.pc             for `pkg-config --cflags --libs chassis`
#   $(LIBDIR)/cmake/chassis/                   for CMake's `find_package(chassis)`
#
# ABI is CHASSIS_ABI_VERSION of include/chassis.h (bumped only when an old program would
# misread the library), so the SONAME changes exactly when programs must be rebuilt. Built in a
# target directory of its own (TARGET_DIR), so the SONAME never reaches target/release, which
# the in-tree examples link against. PROFILE=debug builds faster (the tests use it). Linux.

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PROFILE ?= release
TARGET_DIR ?= target/c-install
CARGO ?= cargo

VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
ABI := $(shell sed -n 's/^\#define CHASSIS_ABI_VERSION \([0-9]*\).*/\1/p' include/chassis.h)
SONAME := libchassis.so.$(ABI)
REAL := $(SONAME).$(VERSION)
OUT := $(TARGET_DIR)/$(if $(filter release,$(PROFILE)),release,debug)

.PHONY: lib install uninstall

lib:
	$(CARGO) rustc --locked --lib --crate-type cdylib,staticlib --profile $(if $(filter debug,$(PROFILE)),dev,$(PROFILE)) \
		--target-dir $(TARGET_DIR) -- -C link-arg=-Wl,-soname,$(SONAME)

install: lib
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)
	install -m 644 include/chassis.h $(DESTDIR)$(INCLUDEDIR)/chassis.h
	install -m 755 $(OUT)/libchassis.so $(DESTDIR)$(LIBDIR)/$(REAL)
	ln -sf $(REAL) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libchassis.so
	install -m 644 $(OUT)/libchassis.a $(DESTDIR)$(LIBDIR)/libchassis.a
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
		-e 's|@VERSION@|$(VERSION)|' include/chassis.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/chassis.pc
	install -d $(DESTDIR)$(LIBDIR)/cmake/chassis
	sed -e 's|@CMAKE_LIBDIR@|$(LIBDIR)|' -e 's|@CMAKE_INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@ABI@|$(ABI)|g' \
		-e 's|@VERSION@|$(VERSION)|' include/chassis-config.cmake.in > $(DESTDIR)$(LIBDIR)/cmake/chassis/chassis-config.cmake
	sed -e 's|@VERSION@|$(VERSION)|' include/chassis-config-version.cmake.in \
		> $(DESTDIR)$(LIBDIR)/cmake/chassis/chassis-config-version.cmake

uninstall:
	rm -f $(DESTDIR)$(INCLUDEDIR)/chassis.h $(DESTDIR)$(LIBDIR)/$(REAL) \
		$(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libchassis.so \
		$(DESTDIR)$(LIBDIR)/libchassis.a $(DESTDIR)$(LIBDIR)/pkgconfig/chassis.pc \
		$(DESTDIR)$(LIBDIR)/cmake/chassis/chassis-config.cmake \
		$(DESTDIR)$(LIBDIR)/cmake/chassis/chassis-config-version.cmake
	-rmdir $(DESTDIR)$(LIBDIR)/cmake/chassis $(DESTDIR)$(LIBDIR)/cmake $(DESTDIR)$(LIBDIR)/pkgconfig 2>/dev/null
