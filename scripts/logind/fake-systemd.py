#!/usr/bin/python3
# A stand-in for org.freedesktop.systemd1 on a private system bus, enough for
# systemd-logind: poweroff.target reports LoadState "loaded", StartUnit is
# always refused (nothing is ever powered off), KillUnit(SIGHUP) on
# systemd-logind.service is relayed to the logind process.
import os, signal, sys
import dbus, dbus.service, dbus.mainloop.glib
from gi.repository import GLib

dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.bus.BusConnection(os.environ["DBUS_SYSTEM_BUS_ADDRESS"])
name = dbus.service.BusName("org.freedesktop.systemd1", bus)
LOGIND_PIDFILE = sys.argv[1] if len(sys.argv) > 1 else ""

def logind_pid():
    try:
        return int(open(LOGIND_PIDFILE).read().strip())
    except Exception:
        return 0

class Manager(dbus.service.Object):
    @dbus.service.method("org.freedesktop.systemd1.Manager", in_signature="ss", out_signature="o")
    def StartUnit(self, unit, mode):
        raise dbus.exceptions.DBusException("the test systemd never starts " + unit,
                                            name="org.freedesktop.DBus.Error.AccessDenied")

    @dbus.service.method("org.freedesktop.systemd1.Manager", in_signature="ssi", out_signature="")
    def KillUnit(self, unit, whom, sig):
        pid = logind_pid()
        if unit == "systemd-logind.service" and pid:
            os.kill(pid, int(sig))

    @dbus.service.method("org.freedesktop.systemd1.Manager", in_signature="s", out_signature="o")
    def GetUnit(self, unit):
        return "/org/freedesktop/systemd1/unit/" + unit.replace(".", "_2e").replace("-", "_2d")

    @dbus.service.method("org.freedesktop.systemd1.Manager", in_signature="s", out_signature="o")
    def LoadUnit(self, unit):
        return self.GetUnit(unit)

    @dbus.service.method("org.freedesktop.systemd1.Manager", in_signature="", out_signature="")
    def Subscribe(self):
        pass

class Units(dbus.service.FallbackObject):
    @dbus.service.method("org.freedesktop.DBus.Properties", in_signature="ss", out_signature="v")
    def Get(self, iface, prop):
        if prop == "LoadState":
            return "loaded"
        if prop in ("ActiveState",):
            return "inactive"
        if prop == "SubState":
            return "dead"
        raise dbus.exceptions.DBusException("no property " + prop, name="org.freedesktop.DBus.Error.UnknownProperty")

Manager(bus, "/org/freedesktop/systemd1")
Units(bus, "/org/freedesktop/systemd1/unit")
GLib.MainLoop().run()
