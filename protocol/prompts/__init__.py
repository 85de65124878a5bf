"""What a server offers beyond tools and resources, sans I/O (issue 29): the
operator's prompts (prompts/list, prompts/get) and completions of prompt
arguments and resource template parameters (completion/complete)."""
