"""The conversation view and what sits around it: the list of conversations, input, legend.

chat_view renders a conversation (view_reading reads it back, view_navigation moves about it);
conversation_list is the left column of chats.
"""
