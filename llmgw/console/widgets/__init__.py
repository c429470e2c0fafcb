"""Generic pieces of the screen: tables, the sidebar, dialogs and forms. None of them knows the admin API."""

from llmgw.console.widgets.dialogs import Confirm, Dialog, Menu, Message
from llmgw.console.widgets.form import ChoiceField, Form, TextField
from llmgw.console.widgets.sidebar import Sidebar
from llmgw.console.widgets.table import Row, SelectableText, Table

__all__ = ["ChoiceField", "Confirm", "Dialog", "Form", "Menu", "Message", "Row", "SelectableText", "Sidebar",
           "Table", "TextField"]
